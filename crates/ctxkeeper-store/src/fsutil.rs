//! Durable file primitives shared by the workspace archive, the JSON-file store and long-term
//! memory. All functions block; callers run them inside `tokio::task::spawn_blocking`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::StoreError;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary file name beside `path`, unique within the machine.
fn temp_path(path: &Path) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

/// Makes a directory's entries (a rename, a new file) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to a fresh temporary file beside `path` and fsyncs it.
fn write_temp(path: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
    let temp = temp_path(path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => Ok(temp),
        Err(err) => {
            let _ = fs::remove_file(&temp);
            Err(err)
        }
    }
}

/// Replaces `path` atomically: temporary file, fsync, rename, fsync of the directory. A reader
/// (or a crash) sees the old content or the new, never a mixture.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent(path)?;
    fs::create_dir_all(dir)?;
    let temp = write_temp(path, bytes)?;
    if let Err(err) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(err);
    }
    sync_dir(dir)
}

/// Creates `path` with `bytes` only if it does not exist yet, atomically and durably. Returns
/// false when it already existed.
pub(crate) fn create_new_durable(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let dir = parent(path)?;
    fs::create_dir_all(dir)?;
    let temp = write_temp(path, bytes)?;
    // A hard link fails when the target exists, so the complete file appears under its name
    // at once or not at all.
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => {
            sync_dir(dir)?;
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(err),
    }
}

fn parent(path: &Path) -> io::Result<&Path> {
    path.parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent"))
}

/// An exclusive advisory lock on `path` (created if missing), held until dropped. It excludes
/// other processes and other handles in this process alike.
pub(crate) fn lock_file(path: &Path) -> io::Result<File> {
    fs::create_dir_all(parent(path)?)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.lock()?;
    Ok(file)
}

/// Appends `bytes` (whole lines) to `path` and fsyncs. A torn last line left by a crash (no
/// final newline) is cut off first, so an append never glues onto garbage. Cost: the appended
/// bytes plus one byte read, independent of the file size.
pub(crate) fn append_lines(path: &Path, bytes: &[u8]) -> io::Result<u64> {
    let dir = parent(path)?;
    fs::create_dir_all(dir)?;
    let existed = path.exists();
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            let keep = last_newline_end(&mut file, len)?;
            file.set_len(keep)?;
        }
    }
    file.write_all(bytes)?;
    file.sync_data()?;
    if !existed {
        sync_dir(dir)?;
    }
    Ok(file.metadata()?.len())
}

/// The offset just after the last `\n` before `end` (0 if none).
fn last_newline_end(file: &mut File, end: u64) -> io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut pos = end;
    let mut buf = vec![0u8; CHUNK as usize];
    while pos > 0 {
        let start = pos.saturating_sub(CHUNK);
        let n = (pos - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        pos = start;
    }
    Ok(0)
}

/// The last `n` complete lines of a file (without their newlines), oldest first, reading
/// backwards from the end so the cost follows what is returned, not the file size. A torn
/// final line (no newline) is skipped. `accept` may reject lines (they are not counted).
pub(crate) fn tail_lines(
    path: &Path,
    n: usize,
    mut accept: impl FnMut(&[u8]) -> bool,
) -> io::Result<Vec<Vec<u8>>> {
    let mut file = File::open(path)?;
    let mut end = file.metadata()?.len();
    // Skip a torn last line.
    end = last_newline_end(&mut file, end)?;
    let mut out: Vec<Vec<u8>> = Vec::new();
    while end > 0 && out.len() < n {
        let start = last_newline_end(&mut file, end - 1)?;
        let mut line = vec![0u8; (end - 1 - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut line)?;
        if accept(&line) {
            out.push(line);
        }
        end = start;
    }
    out.reverse();
    Ok(out)
}

/// Reads a whole file, mapping a missing file to `None`.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Runs blocking file work on tokio's blocking pool.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| StoreError::backend("filesystem", format!("blocking task failed: {err}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_repairs_a_torn_tail_and_tail_reads_backwards() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("log.jsonl");
        append_lines(&path, b"one\ntwo\n")?;
        // A crash in the middle of a write leaves a line without its newline.
        OpenOptions::new()
            .append(true)
            .open(&path)?
            .write_all(b"tor")?;
        assert_eq!(
            tail_lines(&path, 5, |_| true)?,
            vec![b"one".to_vec(), b"two".to_vec()]
        );
        append_lines(&path, b"three\n")?;
        assert_eq!(fs::read(&path)?, b"one\ntwo\nthree\n");
        assert_eq!(
            tail_lines(&path, 2, |_| true)?,
            vec![b"two".to_vec(), b"three".to_vec()]
        );
        Ok(())
    }

    #[test]
    fn create_new_never_overwrites() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("a.txt");
        assert!(create_new_durable(&path, b"first")?);
        assert!(!create_new_durable(&path, b"second")?);
        assert_eq!(fs::read(&path)?, b"first");
        atomic_write(&path, b"third")?;
        assert_eq!(fs::read(&path)?, b"third");
        Ok(())
    }
}
