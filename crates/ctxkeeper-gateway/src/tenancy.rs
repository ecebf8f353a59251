//! Tenancy: who a request belongs to, decided from its credentials. This is the gateway's
//! security boundary: a tenant's sessions, events, archive, memory and MCP tools are reached
//! only by requests this rule gives that tenant.
//!
//! Agents change only their base URL, so nothing else about them can be assumed. The tenant
//! is who the credentials say ([`TenantRule`]): a tenant token (`x-ctxkeeper-tenant-token`,
//! configured by the operator) names its tenant; else a hash of the API key (`key-` + 16 hex
//! digits of its SHA-256; the key itself is never kept); else `default`. The
//! `x-ctxkeeper-tenant` header is honoured only when the operator trusts it (a gateway behind
//! an authenticating proxy) or when it names the tenant of the token sent with it; otherwise a
//! request naming a tenant is refused, never silently moved. A tenant named in a header must
//! pass the store's identifier rules (`../../x` is refused, never rewritten into a path).
//!
//! ```
//! use axum::http::HeaderMap;
//! use ctxkeeper_gateway::tenancy::TenantRule;
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("authorization", "Bearer sk-secret".parse().unwrap());
//! let tenant = TenantRule::default().resolve(&headers).unwrap();
//! assert!(tenant.starts_with("key-") && !tenant.contains("secret"));
//! ```

use std::collections::HashMap;

use axum::http::HeaderMap;
use ctxkeeper_store::StoreError;
use ctxkeeper_store::state::validate_identifier;
use sha2::{Digest, Sha256};

/// Header naming the tenant.
pub const TENANT_HEADER: &str = "x-ctxkeeper-tenant";

/// The tenant of requests without a tenant header or an API key.
pub const DEFAULT_TENANT: &str = "default";

/// Header carrying a tenant-scoped token (see [`TenantRule`]).
pub const TENANT_TOKEN_HEADER: &str = "x-ctxkeeper-tenant-token";

/// Why a request was given no tenant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    /// A malformed header or identifier (400).
    #[error("{0}")]
    Malformed(String),
    /// A tenant token that the gateway does not know (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A tenant the request's credentials do not allow (403).
    #[error("{0}")]
    Forbidden(String),
}

impl From<StoreError> for TenantError {
    fn from(err: StoreError) -> TenantError {
        TenantError::Malformed(err.to_string())
    }
}

/// How a request's tenant is chosen: from its credentials, and from the `x-ctxkeeper-tenant`
/// header only where the operator allows it. One rule serves every surface (model calls,
/// session events, `/mcp`, the admin API's tenant tokens).
///
/// 1. A tenant token (`x-ctxkeeper-tenant-token`) names its tenant; an unknown token is
///    refused (401), and an `x-ctxkeeper-tenant` header naming another tenant too (403).
/// 2. `x-ctxkeeper-tenant` alone is honoured only with [`TenantRule::trust_header`] (the
///    gateway sits behind a proxy that authenticates clients and sets the header); otherwise
///    it is refused (403) rather than ignored, so a client that asks for a tenant never
///    silently lands in another.
/// 3. Else the hash of the API key (`key-…`), else [`DEFAULT_TENANT`].
///
/// ```
/// use axum::http::HeaderMap;
/// use ctxkeeper_gateway::tenancy::{TenantError, TenantRule};
///
/// let rule = TenantRule::default().with_token("acme", "tok-acme").unwrap();
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ctxkeeper-tenant", "acme".parse().unwrap());
/// assert!(matches!(rule.resolve(&headers), Err(TenantError::Forbidden(_))));
/// headers.insert("x-ctxkeeper-tenant-token", "tok-acme".parse().unwrap());
/// assert_eq!(rule.resolve(&headers).unwrap(), "acme");
/// ```
#[derive(Clone, Default)]
pub struct TenantRule {
    trust_header: bool,
    /// SHA-256 of each tenant token → its tenant. Only digests are kept, so the rule can be
    /// logged or dumped without revealing a token.
    tokens: HashMap<[u8; 32], String>,
}

impl std::fmt::Debug for TenantRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantRule")
            .field("trust_header", &self.trust_header)
            .field("tenant_tokens", &self.tokens.len())
            .finish()
    }
}

impl TenantRule {
    /// Honours `x-ctxkeeper-tenant` from every client: only behind a proxy that
    /// authenticates clients and sets (or strips) the header itself.
    pub fn trust_header(mut self, trust: bool) -> TenantRule {
        self.trust_header = trust;
        self
    }

    /// Whether `x-ctxkeeper-tenant` is trusted from every client.
    pub fn trusts_header(&self) -> bool {
        self.trust_header
    }

    /// Adds a token that scopes its bearer to `tenant` (model calls, events, `/mcp`, and the
    /// admin API as `Authorization: Bearer <token>`).
    pub fn with_token(mut self, tenant: &str, token: &str) -> Result<TenantRule, TenantError> {
        validate_identifier("tenant", tenant)?;
        if token.trim().len() < 8 {
            return Err(TenantError::Malformed(format!(
                "the token of tenant {tenant:?} is shorter than 8 characters"
            )));
        }
        self.tokens.insert(digest(token.trim()), tenant.to_string());
        Ok(self)
    }

    /// Whether any tenant token is configured.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The tenant `token` is scoped to, if it is a tenant token.
    pub fn token_tenant(&self, token: &str) -> Option<&str> {
        self.tokens.get(&digest(token.trim())).map(String::as_str)
    }

    /// The tenant of a request (see the type's docs).
    pub fn resolve(&self, headers: &HeaderMap) -> Result<String, TenantError> {
        let named = named_tenant(headers)?;
        if let Some(value) = headers.get(TENANT_TOKEN_HEADER) {
            let token = value.to_str().map_err(|_| {
                TenantError::Malformed(format!("{TENANT_TOKEN_HEADER} is not ASCII"))
            })?;
            let Some(tenant) = self.token_tenant(token) else {
                return Err(TenantError::Unauthorized(format!(
                    "unknown {TENANT_TOKEN_HEADER}"
                )));
            };
            return match named {
                Some(named) if named != tenant => Err(TenantError::Forbidden(format!(
                    "{TENANT_HEADER} names a tenant the tenant token does not allow"
                ))),
                _ => Ok(tenant.to_string()),
            };
        }
        if let Some(named) = named {
            if self.trust_header {
                return Ok(named.to_string());
            }
            return Err(TenantError::Forbidden(format!(
                "{TENANT_HEADER} is honoured only with a tenant token ({TENANT_TOKEN_HEADER}) or \
                 when the gateway trusts the header (--trust-tenant-header, behind a proxy that \
                 authenticates clients); without it the tenant is the API key's"
            )));
        }
        Ok(key_tenant(headers))
    }
}

/// The `x-ctxkeeper-tenant` header, validated, if present.
fn named_tenant(headers: &HeaderMap) -> Result<Option<&str>, TenantError> {
    let Some(value) = headers.get(TENANT_HEADER) else {
        return Ok(None);
    };
    let tenant = value
        .to_str()
        .map_err(|_| TenantError::Malformed(format!("{TENANT_HEADER} is not ASCII")))?;
    validate_identifier("tenant", tenant)?;
    Ok(Some(tenant))
}

/// The tenant of the request's API key (`key-` + 16 hex digits of its SHA-256), else
/// [`DEFAULT_TENANT`].
fn key_tenant(headers: &HeaderMap) -> String {
    match api_key(headers) {
        Some(key) => format!("key-{}", &hex::encode(digest(key))[..16]),
        None => DEFAULT_TENANT.to_string(),
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

/// The client's API key: `x-api-key`, else the bearer token of `Authorization`.
fn api_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim()).filter(|k| !k.is_empty());
    }
    let auth = headers.get("authorization")?.to_str().ok()?.trim();
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .unwrap_or(auth)
        .trim();
    Some(token).filter(|t| !t.is_empty())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    pub(crate) fn tenant(
        rule: &TenantRule,
        pairs: &[(&'static str, &str)],
    ) -> Result<String, TenantError> {
        rule.resolve(&headers(pairs))
    }

    #[test]
    fn tenant_comes_from_the_api_key_by_default() {
        let rule = TenantRule::default();
        let a = tenant(&rule, &[("x-api-key", "sk-ant-1")]).unwrap();
        let b = tenant(&rule, &[("authorization", "Bearer sk-ant-1")]).unwrap();
        assert_eq!(a, b, "the same key names the same tenant in both headers");
        assert!(a.starts_with("key-") && !a.contains("sk-ant"));
        assert_ne!(a, tenant(&rule, &[("x-api-key", "sk-ant-2")]).unwrap());
        assert_eq!(tenant(&rule, &[]).unwrap(), DEFAULT_TENANT);
    }

    #[test]
    fn a_named_tenant_without_trust_is_refused_not_honoured() {
        // Regression: the header used to win over the API key, so any caller could write
        // into and watch another tenant's sessions.
        let rule = TenantRule::default();
        let refused = tenant(
            &rule,
            &[
                (TENANT_HEADER, "acme"),
                ("authorization", "Bearer sk-invalid"),
            ],
        );
        assert!(
            matches!(refused, Err(TenantError::Forbidden(_))),
            "{refused:?}"
        );
        let trusted = TenantRule::default().trust_header(true);
        assert_eq!(
            tenant(&trusted, &[(TENANT_HEADER, "acme"), ("x-api-key", "k")]).unwrap(),
            "acme"
        );
    }

    #[test]
    fn tenant_tokens_scope_their_bearer() {
        let rule = TenantRule::default()
            .with_token("acme", "acme-token-1")
            .unwrap()
            .with_token("globex", "globex-token-1")
            .unwrap();
        let token = |t| tenant(&rule, &[(TENANT_TOKEN_HEADER, t)]);
        assert_eq!(token("acme-token-1").unwrap(), "acme");
        assert_eq!(token("globex-token-1").unwrap(), "globex");
        assert!(matches!(
            token("guess-token"),
            Err(TenantError::Unauthorized(_))
        ));
        let other = tenant(
            &rule,
            &[
                (TENANT_TOKEN_HEADER, "acme-token-1"),
                (TENANT_HEADER, "globex"),
            ],
        );
        assert!(matches!(other, Err(TenantError::Forbidden(_))), "{other:?}");
        let same = tenant(
            &rule,
            &[
                (TENANT_TOKEN_HEADER, "acme-token-1"),
                (TENANT_HEADER, "acme"),
            ],
        );
        assert_eq!(same.unwrap(), "acme");
        assert!(
            TenantRule::default()
                .with_token("../x", "long-enough")
                .is_err()
        );
        assert!(TenantRule::default().with_token("acme", "short").is_err());
        assert!(
            !format!("{rule:?}").contains("token-1"),
            "tokens never reach Debug"
        );
    }
}
