//! `redis://…`: sessions in Redis — standalone, cluster or sentinel.
//!
//! | URL | deployment |
//! | --- | --- |
//! | `redis://[user:pass@]host:port[/db]` | standalone (reconnects automatically) |
//! | `redis+cluster://host1:port,host2:port` | Redis Cluster |
//! | `redis+sentinel://sentinel1:port,sentinel2:port/MASTER` | the master Sentinel names |
//!
//! A `?prefix=NAME` query parameter sets the key prefix (default `ctxkeeper`). Keys:
//!
//! ```text
//! PREFIX:s:{tenant|user|agent|session}:state   hash: version, state, created, updated
//! PREFIX:s:{tenant|user|agent|session}:log     list: one JSON entry per message
//! PREFIX:s:{tenant|user|agent|session}:ctx:G   list: the items of context generation G
//! PREFIX:idx:tenant                            sorted set of the tenant's sessions by update time
//! PREFIX:tenants                               set of tenants (for clean-up and listing across tenants)
//! ```
//!
//! Listing the tenants ([`SessionStore::tenants`]) walks the set of tenants with `SSCAN`, a
//! page at a time (never `KEYS`), and reads each tenant's count and newest update from its
//! index (`ZCARD`, the highest score): two commands per tenant, whatever its sessions.
//!
//! The state hash holds the head of the state and the shape of its current generation
//! (`generation`, `context_len`, `trail_len`; see [`crate::generations`]); a hash without them
//! holds a whole state written before generations.
//!
//! The braces are a cluster hash tag: a session's keys live in one slot, so save and
//! append are single Lua scripts — compare-and-swap and gap-free numbering are atomic on the
//! server. Identifiers cannot contain `|`, `{` or `}`, so keys never collide. Search ranks in
//! the client over the tenant's logs (no RediSearch module needed).

use async_trait::async_trait;
use ctxkeeper_core::model::Message;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};

use crate::generations::{ContextWrite, assemble, messages_of, split};
use crate::session::{
    AppendOutcome, Commit, Committed, HistoryPage, LogEntry, SearchHit, SearchQuery, SearchScope,
    SessionFilter, SessionInfo, SessionStore, TenantInfo, Versioned, parse_entry, rank_entries,
    sort_sessions, sort_tenants,
};
use crate::state::{AgentState, SessionKey};
use crate::time::now_ms;
use crate::{StoreError, redact};

const APPEND_SCRIPT: &str = r#"
local n = redis.call('LLEN', KEYS[2])
for i = 2, #ARGV do
  redis.call('RPUSH', KEYS[2], '{"seq":' .. string.format('%d', n + i - 1) .. ',"at_ms":' .. ARGV[1] .. ',"message":' .. ARGV[i] .. '}')
end
redis.call('HSET', KEYS[1], 'updated', ARGV[1])
redis.call('HSETNX', KEYS[1], 'created', ARGV[1])
return n + 1
"#;

/// A save with its log entries in one script: Redis runs a script atomically, so the state,
/// its context items and its log entries land together or not at all. KEYS: the state hash,
/// the log, the prefix of the generation lists (`…:ctx:`, completed with the generation
/// number: the same hash tag, so the same slot). ARGV: expected version, head, now, mode
/// (`g`: a new generation, `a`: append to the current one), the context and trail counts
/// an append continues, the new context and trail counts, the number of items, the items,
/// then the messages. Returns {1, new version, first seq, generation}, {0, actual version,
/// 0, 0} for a lost swap, or {2, generation, context, trail} for an append that does not
/// continue the stored generation.
const COMMIT_SCRIPT: &str = r#"
local cur = redis.call('HGET', KEYS[1], 'version')
local exp = ARGV[1]
if (exp == '' and cur) or (exp ~= '' and cur ~= exp) then
  return {0, cur or '', 0, 0}
end
local shape = redis.call('HMGET', KEYS[1], 'generation', 'context_len', 'trail_len')
local gen = tonumber(shape[1] or '0')
local clen = tonumber(shape[2] or '0')
local tlen = tonumber(shape[3] or '0')
local nc, nt, ni = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
if ARGV[4] == 'a' then
  if gen == 0 or clen ~= tonumber(ARGV[5]) or tlen ~= tonumber(ARGV[6]) then
    return {2, tostring(gen), clen, tlen}
  end
  clen = clen + nc
  tlen = tlen + nt
else
  gen = gen + 1
  clen = nc
  tlen = nt
end
local new = (tonumber(cur) or 0) + 1
redis.call('HSET', KEYS[1], 'version', new, 'state', ARGV[2], 'updated', ARGV[3], 'generation', gen, 'context_len', clen, 'trail_len', tlen)
redis.call('HSETNX', KEYS[1], 'created', ARGV[3])
local list = KEYS[3] .. gen
for i = 10, 9 + ni do
  redis.call('RPUSH', list, ARGV[i])
end
local n = redis.call('LLEN', KEYS[2])
for i = 10 + ni, #ARGV do
  redis.call('RPUSH', KEYS[2], '{"seq":' .. string.format('%d', n + i - 9 - ni) .. ',"at_ms":' .. ARGV[3] .. ',"message":' .. ARGV[i] .. '}')
end
return {1, tostring(new), n + 1, gen}
"#;

/// Tenants read per `SSCAN` step when listing them.
const TENANT_SCAN_PAGE: u64 = 256;

#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The Redis session store.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    prefix: String,
    shown_url: String,
    append: Script,
    commit: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.shown_url)
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn err(e: redis::RedisError) -> StoreError {
    StoreError::backend("redis", e)
}

/// Splits `?prefix=…` off a URL; other query parameters stay for the redis client.
fn split_prefix(url: &str) -> Result<(String, String), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), "ctxkeeper".to_string()));
    };
    let mut prefix = "ctxkeeper".to_string();
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("prefix", value)) => prefix = value.to_string(),
            _ => rest.push(pair),
        }
    }
    if prefix.is_empty() || prefix.contains(['{', '}', ' ']) {
        return Err(StoreError::InvalidInput(format!(
            "bad redis key prefix {prefix:?}"
        )));
    }
    let base = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((base, prefix))
}

/// A connection to the deployment a URL names, its key prefix, and a client for the
/// dedicated pub/sub connection the event bus needs (for a cluster, the first node: Redis
/// Cluster forwards every `PUBLISH` to all nodes).
pub(crate) struct Deployment {
    pub(crate) conn: Conn,
    pub(crate) prefix: String,
    pub(crate) pubsub: redis::Client,
    pub(crate) shown_url: String,
}

/// Connects to the deployment a URL names (see the module docs) and checks it answers.
pub(crate) async fn connect_deployment(url: &str) -> Result<Deployment, StoreError> {
    let shown_url = redact(url);
    let (url, prefix) = split_prefix(url)?;
    let unreachable = |e: redis::RedisError| {
        StoreError::backend("redis", format!("cannot connect to {shown_url}: {e}"))
    };
    let (conn, pubsub) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        let nodes: Vec<String> = rest
            .trim_end_matches('/')
            .split(',')
            .map(|n| format!("redis://{n}"))
            .collect();
        let first = redis::Client::open(nodes[0].as_str()).map_err(unreachable)?;
        let client = redis::cluster::ClusterClient::new(nodes).map_err(unreachable)?;
        (
            Conn::Cluster(client.get_async_connection().await.map_err(unreachable)?),
            first,
        )
    } else if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        let (hosts, master) = rest.split_once('/').ok_or_else(|| {
            StoreError::InvalidInput("redis+sentinel:// needs /MASTER_NAME".into())
        })?;
        let nodes: Vec<String> = hosts.split(',').map(|n| format!("redis://{n}")).collect();
        let mut sentinel = redis::sentinel::Sentinel::build(nodes).map_err(unreachable)?;
        let client = sentinel
            .async_master_for(master, None)
            .await
            .map_err(unreachable)?;
        (
            Conn::Single(
                ConnectionManager::new(client.clone())
                    .await
                    .map_err(unreachable)?,
            ),
            client,
        )
    } else {
        let client = redis::Client::open(url.as_str()).map_err(unreachable)?;
        (
            Conn::Single(
                ConnectionManager::new(client.clone())
                    .await
                    .map_err(unreachable)?,
            ),
            client,
        )
    };
    // Fail at open, not at first use, when the server is not there.
    let _: String = redis::cmd("PING")
        .query_async(&mut conn.clone())
        .await
        .map_err(unreachable)?;
    Ok(Deployment {
        conn,
        prefix,
        pubsub,
        shown_url,
    })
}

impl RedisStore {
    /// Connects to the deployment a URL names (see the module docs).
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        let deployment = connect_deployment(url).await?;
        Ok(RedisStore {
            conn: deployment.conn,
            prefix: deployment.prefix,
            shown_url: deployment.shown_url,
            append: Script::new(APPEND_SCRIPT),
            commit: Script::new(COMMIT_SCRIPT),
        })
    }

    fn tag(key: &SessionKey) -> String {
        format!(
            "{{{}|{}|{}|{}}}",
            key.tenant(),
            key.user(),
            key.agent(),
            key.session()
        )
    }

    fn state_key(&self, key: &SessionKey) -> String {
        format!("{}:s:{}:state", self.prefix, Self::tag(key))
    }

    fn log_key(&self, key: &SessionKey) -> String {
        format!("{}:s:{}:log", self.prefix, Self::tag(key))
    }

    /// The prefix of a session's generation lists: `…:ctx:<generation>`.
    fn context_prefix(&self, key: &SessionKey) -> String {
        format!("{}:s:{}:ctx:", self.prefix, Self::tag(key))
    }

    fn index_key(&self, tenant: &str) -> String {
        format!("{}:idx:{tenant}", self.prefix)
    }

    fn tenants_key(&self) -> String {
        format!("{}:tenants", self.prefix)
    }

    fn member(key: &SessionKey) -> String {
        format!("{}|{}|{}", key.user(), key.agent(), key.session())
    }

    fn key_of(tenant: &str, member: &str) -> Option<SessionKey> {
        let mut parts = member.splitn(3, '|');
        let (user, agent, session) = (parts.next()?, parts.next()?, parts.next()?);
        SessionKey::new(tenant, user, agent, session).ok()
    }

    async fn index(&self, key: &SessionKey, now: i64) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        // Separate commands: in a cluster the index lives in another slot than the session.
        let _: () = redis::cmd("ZADD")
            .arg(self.index_key(key.tenant()))
            .arg(now)
            .arg(Self::member(key))
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        let _: () = redis::cmd("SADD")
            .arg(self.tenants_key())
            .arg(key.tenant())
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        Ok(())
    }

    /// The first `count` items of a generation (all of them for 0).
    async fn items(
        &self,
        key: &SessionKey,
        generation: u64,
        count: u64,
    ) -> Result<Vec<Vec<u8>>, StoreError> {
        if count == 0 && generation == 0 {
            return Ok(Vec::new());
        }
        let stop = if count == 0 {
            -1
        } else {
            i64::try_from(count).unwrap_or(i64::MAX) - 1
        };
        redis::cmd("LRANGE")
            .arg(format!("{}{generation}", self.context_prefix(key)))
            .arg(0)
            .arg(stop)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(err)
    }

    async fn members(&self, tenant: &str) -> Result<Vec<String>, StoreError> {
        redis::cmd("ZRANGE")
            .arg(self.index_key(tenant))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(err)
    }

    async fn read_log(
        &self,
        key: &SessionKey,
        start: i64,
        stop: i64,
    ) -> Result<Vec<LogEntry>, StoreError> {
        let raw: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.log_key(key))
            .arg(start)
            .arg(stop)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        raw.iter().map(|r| parse_entry(r)).collect()
    }

    async fn info(&self, key: SessionKey) -> Result<Option<SessionInfo>, StoreError> {
        let mut conn = self.conn.clone();
        let (version, created, updated): (Option<u64>, Option<i64>, Option<i64>) =
            redis::cmd("HMGET")
                .arg(self.state_key(&key))
                .arg("version")
                .arg("created")
                .arg("updated")
                .query_async(&mut conn)
                .await
                .map_err(err)?;
        let log_len: u64 = redis::cmd("LLEN")
            .arg(self.log_key(&key))
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        let (Some(created), Some(updated)) = (created, updated) else {
            return Ok(None);
        };
        Ok(Some(SessionInfo {
            key,
            version,
            log_len,
            created_at_ms: created,
            updated_at_ms: updated,
        }))
    }
}

#[async_trait]
impl SessionStore for RedisStore {
    fn backend(&self) -> &'static str {
        "redis"
    }

    async fn load(&self, key: &SessionKey) -> Result<Option<Versioned>, StoreError> {
        type Row = (
            Option<u64>,
            Option<String>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
        let (version, head, generation, context, trail): Row = redis::cmd("HMGET")
            .arg(self.state_key(key))
            .arg("version")
            .arg("state")
            .arg("generation")
            .arg("context_len")
            .arg("trail_len")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        let (Some(version), Some(head)) = (version, head) else {
            return Ok(None);
        };
        let Some(generation) = generation else {
            // A state written whole, before generations.
            return Ok(Some(Versioned {
                state: AgentState::from_json(&head)?,
                version,
                generation: None,
            }));
        };
        let count = context.unwrap_or(0) + trail.unwrap_or(0);
        // Items of a generation are only ever added after the shape that counts them (one
        // script), so the first `count` are this state's even when a writer went on since.
        let items = if count == 0 {
            Vec::new()
        } else {
            self.items(key, generation, count).await?
        };
        Ok(Some(Versioned {
            state: assemble(&head, &items)?,
            version,
            generation: Some(generation),
        }))
    }

    async fn append_checked(
        &self,
        key: &SessionKey,
        messages: &[Message],
    ) -> Result<AppendOutcome, StoreError> {
        let now = now_ms();
        let mut invocation = self.append.key(self.state_key(key));
        invocation.key(self.log_key(key)).arg(now);
        for message in messages {
            let json = serde_json::to_string(message).map_err(|e| {
                StoreError::InvalidInput(format!("message does not serialize: {e}"))
            })?;
            invocation.arg(json);
        }
        let first: u64 = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        self.index(key, now).await?;
        Ok(AppendOutcome {
            first_seq: first,
            last_seq: first + messages.len() as u64 - 1,
        })
    }

    fn commits_atomically(&self) -> bool {
        true
    }

    fn saves_incrementally(&self) -> bool {
        true
    }

    async fn commit(&self, key: &SessionKey, commit: Commit<'_>) -> Result<Committed, StoreError> {
        let split = split(commit.state)?;
        let now = now_ms();
        let (mode, context, trail) = match commit.write {
            ContextWrite::Generation => ("g", 0, 0),
            ContextWrite::Append { context, trail } => ("a", context, trail),
        };
        let mut invocation = self.commit.key(self.state_key(key));
        invocation
            .key(self.log_key(key))
            .key(self.context_prefix(key))
            .arg(commit.expected.map(|v| v.to_string()).unwrap_or_default())
            .arg(split.head)
            .arg(now)
            .arg(mode)
            .arg(context)
            .arg(trail)
            .arg(split.context)
            .arg(split.trail)
            .arg(split.items.len());
        for item in split.items {
            invocation.arg(item);
        }
        for message in commit.messages {
            let json = serde_json::to_string(message).map_err(|e| {
                StoreError::InvalidInput(format!("message does not serialize: {e}"))
            })?;
            invocation.arg(json);
        }
        let (ok, version, first, generation): (i64, String, u64, u64) = invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        match ok {
            1 => {}
            2 => {
                return Err(StoreError::InvalidInput(format!(
                    "an append after {context} messages and {trail} trail values does not \
                     continue generation {version} ({first} messages, {generation} trail values)"
                )));
            }
            _ => {
                return Err(StoreError::Conflict {
                    expected: commit.expected,
                    actual: version.parse().ok(),
                });
            }
        }
        self.index(key, now).await?;
        let version = version
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("redis version {version:?}")))?;
        let n = commit.messages.len() as u64;
        let appended = (n > 0).then(|| AppendOutcome {
            first_seq: first,
            last_seq: first + n - 1,
        });
        Ok(Committed { version, appended })
    }

    async fn generation_context(
        &self,
        key: &SessionKey,
        generation: u64,
    ) -> Result<Vec<Message>, StoreError> {
        messages_of(&self.items(key, generation, 0).await?)
    }

    async fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        filter.validate()?;
        let mut out = Vec::new();
        for member in self.members(&filter.tenant).await? {
            let Some(key) = Self::key_of(&filter.tenant, &member) else {
                continue;
            };
            if filter.matches(&key)
                && let Some(info) = self.info(key).await?
            {
                out.push(info);
            }
        }
        sort_sessions(&mut out);
        Ok(out)
    }

    async fn tenants(&self) -> Result<Vec<TenantInfo>, StoreError> {
        let mut conn = self.conn.clone();
        // SSCAN may return a member twice across pages; the set keeps each once.
        let mut names = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(self.tenants_key())
                .arg(cursor)
                .arg("COUNT")
                .arg(TENANT_SCAN_PAGE)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            names.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let mut tenants = Vec::with_capacity(names.len());
        for tenant in names {
            let index = self.index_key(&tenant);
            let sessions: u64 = redis::cmd("ZCARD")
                .arg(&index)
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            if sessions == 0 {
                // Every session deleted (the tenant stays in the set for a concurrent writer).
                continue;
            }
            let newest: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(-1)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            let Some((_, score)) = newest.first() else {
                continue;
            };
            tenants.push(TenantInfo {
                tenant,
                sessions,
                // Scores are the millisecond times the index was written with: exact in f64.
                updated_at_ms: *score as i64,
            });
        }
        sort_tenants(&mut tenants);
        Ok(tenants)
    }

    async fn delete(&self, key: &SessionKey) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        // One command per key: in a cluster, multi-key DEL works only within a slot, which
        // holds here (hash tag), but keep it simple and portable.
        let generation: Option<u64> = redis::cmd("HGET")
            .arg(self.state_key(key))
            .arg("generation")
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        let a: u64 = redis::cmd("DEL")
            .arg(self.state_key(key))
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        let b: u64 = redis::cmd("DEL")
            .arg(self.log_key(key))
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        // Every generation, oldest last: the state that named the newest is gone already.
        for generation in (1..=generation.unwrap_or(0)).rev() {
            let _: u64 = redis::cmd("DEL")
                .arg(format!("{}{generation}", self.context_prefix(key)))
                .query_async(&mut conn)
                .await
                .map_err(err)?;
        }
        let _: () = redis::cmd("ZREM")
            .arg(self.index_key(key.tenant()))
            .arg(Self::member(key))
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        Ok(a + b > 0)
    }

    async fn history(
        &self,
        key: &SessionKey,
        page: HistoryPage,
    ) -> Result<Vec<LogEntry>, StoreError> {
        if page.last == 0 {
            return Ok(Vec::new());
        }
        let len: i64 = redis::cmd("LLEN")
            .arg(self.log_key(key))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(err)?;
        let end = page
            .before_seq
            .map_or(len, |b| (i64::try_from(b).unwrap_or(i64::MAX) - 1).min(len));
        if end <= 0 {
            return Ok(Vec::new());
        }
        let start = (end - i64::try_from(page.last).unwrap_or(i64::MAX)).max(0);
        self.read_log(key, start, end - 1).await
    }

    async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let terms = query.terms()?;
        let keys: Vec<SessionKey> = match &query.scope {
            SearchScope::Session(key) => vec![key.clone()],
            SearchScope::Tenant(tenant) => self
                .members(tenant)
                .await?
                .iter()
                .filter_map(|m| Self::key_of(tenant, m))
                .collect(),
        };
        let mut entries = Vec::new();
        for key in keys {
            for entry in self.read_log(&key, 0, -1).await? {
                entries.push((key.clone(), entry));
            }
        }
        Ok(rank_entries(query, &terms, entries))
    }

    async fn purge_before(&self, tenant: Option<&str>, cutoff_ms: i64) -> Result<u64, StoreError> {
        crate::session::check_tenant(tenant)?;
        let mut conn = self.conn.clone();
        let tenants: Vec<String> = match tenant {
            Some(tenant) => vec![tenant.to_string()],
            None => redis::cmd("SMEMBERS")
                .arg(self.tenants_key())
                .query_async(&mut conn)
                .await
                .map_err(err)?,
        };
        let mut removed = 0;
        for tenant in tenants {
            let members: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                .arg(self.index_key(&tenant))
                .arg("-inf")
                .arg(format!("({cutoff_ms}"))
                .query_async(&mut conn)
                .await
                .map_err(err)?;
            for member in members {
                let Some(key) = Self::key_of(&tenant, &member) else {
                    continue;
                };
                // The index may lag behind a concurrent append; the session's own time decides.
                let updated: Option<i64> = redis::cmd("HGET")
                    .arg(self.state_key(&key))
                    .arg("updated")
                    .query_async(&mut conn)
                    .await
                    .map_err(err)?;
                if updated.is_none_or(|u| u < cutoff_ms) && self.delete(&key).await? {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}
