//! The archive (offloader) inside the SQL database: archived items in
//! `ctxkeeper_archive_items`, the context file in numbered chunks of lines in
//! `ctxkeeper_archive_context`, so several hosts share archives through the database alone.

use async_trait::async_trait;
use sqlx::Row;

use super::{Dialect, SqlStore, u64_of};
use crate::StoreError;
use crate::blob::{BlobArchive, Blobs, CONTEXT_FILE, Loc, slice_lines};
use crate::time::now_ms;

impl SqlStore {
    /// The archive (offloader) in the same database.
    pub fn archive(&self) -> SqlArchive {
        SqlArchive {
            inner: BlobArchive::new(SqlBlobs {
                store: self.clone(),
            }),
        }
    }
}

/// Archived items inside the SQL database: every host that reaches the database reads them.
#[derive(Debug)]
pub struct SqlArchive {
    inner: BlobArchive<SqlBlobs>,
}

#[derive(Debug)]
struct SqlBlobs {
    store: SqlStore,
}

impl SqlBlobs {
    fn insert_item_sql(&self) -> &'static str {
        match self.store.dialect {
            Dialect::MySql => {
                "INSERT IGNORE INTO ctxkeeper_archive_items (tenant_dir, path, data, size, created_at) VALUES (?, ?, ?, ?, ?)"
            }
            _ => {
                "INSERT INTO ctxkeeper_archive_items (tenant_dir, path, data, size, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_dir, path) DO NOTHING"
            }
        }
    }

    fn sum_sizes_sql(&self) -> &'static str {
        match self.store.dialect {
            Dialect::MySql => {
                "SELECT CAST(COALESCE(SUM(size), 0) AS SIGNED) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"
            }
            Dialect::Postgres => {
                "SELECT CAST(COALESCE(SUM(size), 0) AS BIGINT) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"
            }
            Dialect::Sqlite => {
                "SELECT COALESCE(SUM(size), 0) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"
            }
        }
    }
}

#[async_trait]
impl Blobs for SqlBlobs {
    async fn create(
        &self,
        tenant_dir: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let s = &self.store;
        let size = bytes.len() as i64;
        let result = sqlx::query(s.q(self.insert_item_sql()))
            .bind(tenant_dir)
            .bind(path)
            .bind(bytes)
            .bind(size)
            .bind(now_ms())
            .execute(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        Ok(result.rows_affected() == 1)
    }

    async fn get(&self, tenant_dir: &str, path: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let s = &self.store;
        sqlx::query_scalar(
            s.q("SELECT data FROM ctxkeeper_archive_items WHERE tenant_dir = ? AND path = ?"),
        )
        .bind(tenant_dir)
        .bind(path)
        .fetch_optional(&s.pool)
        .await
        .map_err(|err| s.err(err))
    }

    async fn list(&self, tenant_dir: &str, dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let s = &self.store;
        // A range instead of LIKE: `_` in sanitized names would be a LIKE wildcard.
        let (low, high) = (format!("{dir}/"), format!("{dir}0"));
        let rows = sqlx::query(s.q("SELECT path, size FROM ctxkeeper_archive_items WHERE tenant_dir = ? AND path >= ? AND path < ?"))
            .bind(tenant_dir)
            .bind(low.as_str())
            .bind(high.as_str())
            .fetch_all(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        let mut out = Vec::new();
        for row in rows {
            let path: String = row.try_get(0).map_err(|err| s.err(err))?;
            let size: i64 = row.try_get(1).map_err(|err| s.err(err))?;
            if let Some(name) = path.strip_prefix(&low)
                && !name.contains('/')
            {
                out.push((name.to_string(), u64_of(size)));
            }
        }
        let context: i64 = sqlx::query_scalar(s.q(self.sum_sizes_sql()))
            .bind(tenant_dir)
            .bind(dir)
            .fetch_one(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        if context > 0 {
            out.push((CONTEXT_FILE.to_string(), u64_of(context)));
        }
        Ok(out)
    }

    async fn append_context(
        &self,
        loc: &Loc,
        lines: Vec<u8>,
        count: u64,
    ) -> Result<(u64, u64), StoreError> {
        let s = &self.store;
        let dir = loc.session_dir();
        let size = lines.len() as i64;
        let count = count as i64;
        let mut last_err = None;
        for _ in 0..100 {
            let mut tx = s.begin().await?;
            let last: i64 = sqlx::query_scalar(s.q("SELECT COALESCE(MAX(last_line), 0) FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ?"))
                .bind(loc.tenant_dir.as_str())
                .bind(dir.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(|err| s.err(err))?;
            let inserted = sqlx::query(s.q("INSERT INTO ctxkeeper_archive_context (tenant_dir, session_dir, first_line, last_line, size, data) VALUES (?, ?, ?, ?, ?, ?)"))
                .bind(loc.tenant_dir.as_str())
                .bind(dir.as_str())
                .bind(last + 1)
                .bind(last + count)
                .bind(size)
                .bind(lines.clone())
                .execute(&mut *tx)
                .await;
            match inserted {
                Ok(_) => {
                    tx.commit().await.map_err(|err| s.err(err))?;
                    return Ok((u64_of(last + 1), u64_of(last + count)));
                }
                // Another writer took these line numbers first: count again.
                Err(sqlx::Error::Database(err)) if err.is_unique_violation() => {
                    let _ = tx.rollback().await;
                    last_err = Some(err.to_string());
                }
                Err(err) => return Err(s.err(err)),
            }
        }
        Err(StoreError::backend(
            s.dialect.name(),
            format!(
                "context append kept conflicting: {}",
                last_err.unwrap_or_default()
            ),
        ))
    }

    async fn read_context(
        &self,
        loc: &Loc,
        lines: Option<(u64, u64)>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let s = &self.store;
        let dir = loc.session_dir();
        let (low, high) = lines.map_or((1, i64::MAX), |(a, b)| {
            (
                i64::try_from(a).unwrap_or(i64::MAX),
                i64::try_from(b).unwrap_or(i64::MAX),
            )
        });
        let rows = sqlx::query(s.q("SELECT first_line, data FROM ctxkeeper_archive_context WHERE tenant_dir = ? AND session_dir = ? AND last_line >= ? AND first_line <= ? ORDER BY first_line"))
            .bind(loc.tenant_dir.as_str())
            .bind(dir.as_str())
            .bind(low)
            .bind(high)
            .fetch_all(&s.pool)
            .await
            .map_err(|err| s.err(err))?;
        let Some(first_row) = rows.first() else {
            return Ok(None);
        };
        let base: i64 = first_row.try_get(0).map_err(|err| s.err(err))?;
        let mut all = Vec::new();
        for row in &rows {
            let data: Vec<u8> = row.try_get(1).map_err(|err| s.err(err))?;
            all.extend_from_slice(&data);
        }
        Ok(match lines {
            None => Some(all),
            Some((a, b)) => {
                let offset = u64_of(base) - 1;
                slice_lines(&all, a - offset, b - offset)
            }
        })
    }
}

crate::blob::delegate_offloader!(SqlArchive);

impl SqlArchive {
    /// The database the archive lives in.
    pub fn dialect(&self) -> Dialect {
        self.inner.blobs.store.dialect
    }
}
