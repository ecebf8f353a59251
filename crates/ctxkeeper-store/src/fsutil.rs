//! Files under a directory the store owns, reached without ever following a symbolic link.
//!
//! The workspace archive, the JSON-file store and long-term memory keep tenant data in one
//! directory tree, and whoever can write into that tree (an agent with a shell in its
//! workspace, another tenant's tooling) could plant a link in it: `MEMORY.md → /etc/passwd`,
//! `sessions/s1 → /etc`, or a link into another tenant's directory. So nothing here resolves a
//! path in one go. A [`Tree`] opens its root once per operation and walks down one component
//! at a time with `openat(…, O_NOFOLLOW)`, creating missing directories with `mkdirat`; every
//! file is then opened, created, renamed, linked or removed relative to the descriptor of its
//! own directory ([`Dir`]). A link anywhere below the root is therefore never followed, for
//! reads, listings, appends and writes alike, and no check-then-open race exists: what was
//! checked is the descriptor that is used.
//!
//! - A path the store names itself (a session directory, `MEMORY.md`, an archive reference)
//!   that turns out to be a link, or not a regular file, is refused with
//!   [`StoreError::Forbidden`] naming it.
//! - Directory listings ([`Dir::entries`]) report links as [`Kind::Link`]; callers pass over
//!   them without following.
//! - Whole files are written to a temporary file (`.NAME.PID.N.tmp`), fsync'd, then renamed
//!   or hard-linked into place; a writer killed in between leaves the temporary file, which
//!   [`Tree::sweep_temp_files`] removes at the next start-up once its writer is gone.
//!
//! The root itself is resolved once ([`Tree::open`]): it is the operator's choice and may
//! be reached through links. Everything blocks; callers run it through [`blocking`].

use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::StoreError;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Directories are opened read-only, never through a link.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Temporary files older than this are removed by a sweep even when their writer still runs
/// (a live writer holds one for the milliseconds of a write and an fsync).
const TEMP_MAX_AGE: Duration = Duration::from_secs(3600);

/// Deepest directory a sweep descends into (the layouts are at most seven levels deep).
const SWEEP_MAX_DEPTH: usize = 16;

/// The mode of new files and directories before the umask, as `std::fs` uses.
fn file_mode() -> Mode {
    Mode::from_raw_mode(0o666)
}

fn dir_mode() -> Mode {
    Mode::from_raw_mode(0o777)
}

/// What a directory entry is, seen without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Link,
    Other,
}

impl Kind {
    fn of(file_type: FileType) -> Kind {
        match file_type {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Link,
            _ => Kind::Other,
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub name: String,
    pub kind: Kind,
    /// Size in bytes (regular files; 0 otherwise).
    pub len: u64,
}

/// What [`Dir::stat`] reports about one name, without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub kind: Kind,
    pub len: u64,
    pub modified_ms: i64,
}

impl Meta {
    fn of(stat: &Stat) -> Meta {
        Meta {
            kind: Kind::of(FileType::from_raw_mode(stat.st_mode)),
            len: u64::try_from(stat.st_size).unwrap_or(0),
            // The field types differ between platforms, hence the `as` casts.
            #[allow(clippy::unnecessary_cast)]
            modified_ms: (stat.st_mtime as i64)
                .saturating_mul(1000)
                .saturating_add(stat.st_mtime_nsec as i64 / 1_000_000),
        }
    }
}

/// A directory tree the store owns; see the [module docs](self).
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    root: PathBuf,
}

impl Tree {
    /// The tree at `root`, created if missing and resolved to its canonical path.
    pub(crate) fn open(root: &Path) -> Result<Tree, StoreError> {
        std::fs::create_dir_all(root)?;
        Ok(Tree {
            root: std::fs::canonicalize(root)?,
        })
    }

    /// The canonical root directory.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    fn open_root(&self) -> Result<OwnedFd, StoreError> {
        rustix::fs::openat(CWD, &self.root, DIR_FLAGS, Mode::empty()).map_err(|errno| {
            StoreError::backend(
                "filesystem",
                format!("cannot open {}: {}", self.root.display(), io_error(errno)),
            )
        })
    }

    /// The directory at `rel` (`a/b/c`, relative to the root; `""` is the root), or `None`
    /// when it does not exist. A link on the way is refused.
    pub(crate) fn dir(&self, rel: &str) -> Result<Option<Dir>, StoreError> {
        self.walk(rel, false)
    }

    /// The directory at `rel`, creating what is missing (each new directory is made durable
    /// in its parent). A link on the way is refused.
    pub(crate) fn create_dir(&self, rel: &str) -> Result<Dir, StoreError> {
        self.walk(rel, true)?.ok_or_else(|| {
            StoreError::backend("filesystem", format!("{rel}: could not be created"))
        })
    }

    fn walk(&self, rel: &str, create: bool) -> Result<Option<Dir>, StoreError> {
        let mut dir = Dir {
            fd: self.open_root()?,
            rel: String::new(),
        };
        for segment in rel.split('/').filter(|s| !s.is_empty()) {
            match dir.subdir_inner(segment, create)? {
                Some(next) => dir = next,
                None => return Ok(None),
            }
        }
        Ok(Some(dir))
    }

    /// Removes temporary files that killed writers left anywhere in the tree: those whose
    /// process is gone, and any older than an hour. Links are not followed. Returns how many
    /// were removed.
    pub(crate) fn sweep_temp_files(&self) -> Result<u64, StoreError> {
        let root = Dir {
            fd: self.open_root()?,
            rel: String::new(),
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        sweep(&root, now, 0)
    }
}

fn sweep(dir: &Dir, now_ms: i64, depth: usize) -> Result<u64, StoreError> {
    let mut removed = 0;
    for entry in dir.entries()? {
        match entry.kind {
            Kind::Dir if depth < SWEEP_MAX_DEPTH => {
                // A directory removed meanwhile (a deleted session) is simply gone.
                if let Ok(Some(sub)) = dir.subdir(&entry.name) {
                    removed += sweep(&sub, now_ms, depth + 1)?;
                }
            }
            Kind::File => {
                let Some(pid) = temp_writer(&entry.name) else {
                    continue;
                };
                let Some(meta) = dir.stat(&entry.name)? else {
                    continue;
                };
                let old = now_ms.saturating_sub(meta.modified_ms) > TEMP_MAX_AGE.as_millis() as i64;
                if (old || !process_alive(pid)) && dir.remove_file(&entry.name)? {
                    removed += 1;
                }
            }
            _ => {}
        }
    }
    Ok(removed)
}

/// The process id in a temporary file name `.NAME.PID.N.tmp`, or `None` for other names.
fn temp_writer(name: &str) -> Option<u32> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = inner.rsplitn(3, '.');
    let counter = parts.next()?;
    let pid = parts.next()?;
    let stem = parts.next()?;
    if stem.is_empty() || !counter.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a process with this id runs on this host. This process counts as running: its
/// own writers may be busy in another thread. A process of another user counts as running.
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH))
}

/// A temporary file name beside `name`, unique within the machine.
fn temp_name(name: &str) -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".{name}.{}.{n}.tmp", std::process::id())
}

fn io_error(errno: Errno) -> io::Error {
    io::Error::from(errno)
}

/// An open directory inside a [`Tree`]; every name is resolved relative to it, never through
/// a link.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    /// The path below the tree's root, for messages.
    rel: String,
}

impl Dir {
    /// `rel/name`, for messages.
    fn shown(&self, name: &str) -> String {
        if self.rel.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.rel)
        }
    }

    fn check_name(&self, name: &str) -> Result<(), StoreError> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(StoreError::InvalidInput(format!(
                "{:?} is not a single path segment",
                self.shown(name)
            )));
        }
        Ok(())
    }

    /// The error for a name that is a link (or not what was expected) where the store expected
    /// its own file or directory.
    fn refused(&self, name: &str, wanted: &str) -> StoreError {
        let shown = self.shown(name);
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if Kind::of(FileType::from_raw_mode(stat.st_mode)) == Kind::Link => {
                StoreError::Forbidden(format!(
                    "{shown} is a symbolic link; links inside the store's directory are never followed"
                ))
            }
            _ => StoreError::Forbidden(format!("{shown} is not a {wanted}")),
        }
    }

    fn error(&self, name: &str, errno: Errno) -> StoreError {
        let err = io_error(errno);
        let message = format!("{}: {err}", self.shown(name));
        if err.kind() == io::ErrorKind::NotFound {
            StoreError::NotFound(message)
        } else {
            StoreError::backend("filesystem", message)
        }
    }

    /// The subdirectory `name`, or `None` when it does not exist.
    pub(crate) fn subdir(&self, name: &str) -> Result<Option<Dir>, StoreError> {
        self.subdir_inner(name, false)
    }

    fn subdir_inner(&self, name: &str, create: bool) -> Result<Option<Dir>, StoreError> {
        self.check_name(name)?;
        let rel = self.shown(name);
        for attempt in 0..2 {
            match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => return Ok(Some(Dir { fd, rel })),
                Err(Errno::NOENT) if create && attempt == 0 => {
                    match rustix::fs::mkdirat(&self.fd, name, dir_mode()) {
                        // Created here: make the new entry durable in its parent.
                        Ok(()) => rustix::fs::fsync(&self.fd).map_err(|e| self.error(name, e))?,
                        // Another writer created it first.
                        Err(Errno::EXIST) => {}
                        Err(errno) => return Err(self.error(name, errno)),
                    }
                }
                Err(Errno::NOENT) => return Ok(None),
                // A link (ELOOP; EMLINK on some BSDs) or something that is not a directory.
                Err(Errno::LOOP | Errno::NOTDIR | Errno::MLINK) => {
                    return Err(self.refused(name, "directory"));
                }
                Err(errno) => return Err(self.error(name, errno)),
            }
        }
        Ok(None)
    }

    /// Opens the regular file `name` with `flags` (plus no-follow), or `None` when it does
    /// not exist (and `flags` does not create it). A link, a FIFO or a device is refused.
    fn open_file(&self, name: &str, flags: OFlags) -> Result<Option<File>, StoreError> {
        self.check_name(name)?;
        // NONBLOCK: opening a planted FIFO must not hang; it is refused below.
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.fd, name, flags, file_mode()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::MLINK | Errno::ISDIR | Errno::NXIO) => {
                return Err(self.refused(name, "regular file"));
            }
            Err(errno) => return Err(self.error(name, errno)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.error(name, e))?;
        if Kind::of(FileType::from_raw_mode(stat.st_mode)) != Kind::File {
            return Err(StoreError::Forbidden(format!(
                "{} is not a regular file",
                self.shown(name)
            )));
        }
        Ok(Some(File::from(fd)))
    }

    /// The regular file `name` opened for reading, or `None`.
    pub(crate) fn open_read(&self, name: &str) -> Result<Option<File>, StoreError> {
        self.open_file(name, OFlags::RDONLY)
    }

    /// The whole content of the regular file `name`, or `None`.
    pub(crate) fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(mut file) = self.open_read(name)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| self.io(name, &e))?;
        Ok(Some(bytes))
    }

    fn io(&self, name: &str, err: &io::Error) -> StoreError {
        StoreError::backend("filesystem", format!("{}: {err}", self.shown(name)))
    }

    /// `name` seen without following a link, or `None` when it does not exist.
    pub(crate) fn stat(&self, name: &str) -> Result<Option<Meta>, StoreError> {
        self.check_name(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(Meta::of(&stat))),
            Err(Errno::NOENT) => Ok(None),
            Err(errno) => Err(self.error(name, errno)),
        }
    }

    /// The directory's entries (not `.` and `..`), links reported as links, unsorted.
    pub(crate) fn entries(&self) -> Result<Vec<Entry>, StoreError> {
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(|e| self.error(".", e))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| self.error(".", e))?;
            let Some(name) = utf8_name(entry.file_name()) else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            // The entry type when the file system reports it, else one stat without following.
            let stat = match entry.file_type() {
                FileType::Directory | FileType::Symlink => None,
                _ => match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => Some(Meta::of(&stat)),
                    // Removed since the listing was read.
                    Err(Errno::NOENT) => continue,
                    Err(errno) => return Err(self.error(name, errno)),
                },
            };
            let (kind, len) = match stat {
                Some(meta) => (meta.kind, meta.len),
                None => (Kind::of(entry.file_type()), 0),
            };
            out.push(Entry {
                name: name.to_string(),
                kind,
                len,
            });
        }
        Ok(out)
    }

    /// Writes `bytes` to a fresh temporary file in this directory and fsyncs it.
    fn write_temp(&self, name: &str, bytes: &[u8]) -> Result<String, StoreError> {
        self.check_name(name)?;
        let temp = temp_name(name);
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL;
        let written = (|| {
            let Some(mut file) = self.open_file(&temp, flags)? else {
                return Err(StoreError::backend(
                    "filesystem",
                    format!("{}: vanished while created", self.shown(&temp)),
                ));
            };
            file.write_all(bytes).map_err(|e| self.io(&temp, &e))?;
            file.sync_all().map_err(|e| self.io(&temp, &e))
        })();
        match written {
            Ok(()) => Ok(temp),
            Err(err) => {
                let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
                Err(err)
            }
        }
    }

    /// Makes this directory's entries (a rename, a new file) durable.
    pub(crate) fn sync(&self) -> Result<(), StoreError> {
        rustix::fs::fsync(&self.fd).map_err(|e| self.error(".", e))
    }

    /// Replaces `name` atomically: temporary file, fsync, rename, fsync of the directory. A
    /// reader (or a crash) sees the old content or the new, never a mixture. A link at `name`
    /// is replaced, not followed.
    pub(crate) fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let temp = self.write_temp(name, bytes)?;
        if let Err(errno) = rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name) {
            let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
            return Err(self.error(name, errno));
        }
        self.sync()
    }

    /// Creates `name` with `bytes` only if nothing has that name yet, atomically and durably.
    /// Returns false when something (a file, or a link, which is left alone) already did.
    pub(crate) fn create_new(&self, name: &str, bytes: &[u8]) -> Result<bool, StoreError> {
        let temp = self.write_temp(name, bytes)?;
        // A hard link fails when the target exists, so the complete file appears under its
        // name at once or not at all.
        let linked = rustix::fs::linkat(&self.fd, temp.as_str(), &self.fd, name, AtFlags::empty());
        let _ = rustix::fs::unlinkat(&self.fd, temp.as_str(), AtFlags::empty());
        match linked {
            Ok(()) => {
                self.sync()?;
                Ok(true)
            }
            Err(Errno::EXIST) => Ok(false),
            Err(errno) => Err(self.error(name, errno)),
        }
    }

    /// Appends `bytes` (whole lines) to the regular file `name` (created if missing) and
    /// fsyncs; see [`append_lines`]. Returns the file's new length.
    pub(crate) fn append_lines(&self, name: &str, bytes: &[u8]) -> Result<u64, StoreError> {
        let created = self.stat(name)?.is_none();
        let mut file = self.open_append(name)?;
        let len = append_lines(&mut file, bytes).map_err(|e| self.io(name, &e))?;
        if created {
            self.sync()?;
        }
        Ok(len)
    }

    /// The regular file `name` opened for reading and appending (created if missing).
    pub(crate) fn open_append(&self, name: &str) -> Result<File, StoreError> {
        self.open_file(name, OFlags::RDWR | OFlags::APPEND | OFlags::CREATE)?
            .ok_or_else(|| {
                StoreError::backend("filesystem", format!("{}: not created", self.shown(name)))
            })
    }

    /// An exclusive advisory lock on the file `name` (created if missing), held until the
    /// returned handle is dropped. It excludes other processes and other handles in this
    /// process alike.
    pub(crate) fn lock(&self, name: &str) -> Result<File, StoreError> {
        let file = self
            .open_file(name, OFlags::RDWR | OFlags::CREATE)?
            .ok_or_else(|| {
                StoreError::backend("filesystem", format!("{}: not created", self.shown(name)))
            })?;
        file.lock().map_err(|e| self.io(name, &e))?;
        Ok(file)
    }

    /// Removes the file (or link) `name`; false if there was none.
    pub(crate) fn remove_file(&self, name: &str) -> Result<bool, StoreError> {
        self.check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(errno) => Err(self.error(name, errno)),
        }
    }

    /// Removes the directory `name` and everything in it; false if there was none. Nothing is
    /// followed: a link inside is removed as the link it is (never what it points to), and
    /// `name` itself being a link is refused, as everywhere in the store.
    pub(crate) fn remove_tree(&self, name: &str) -> Result<bool, StoreError> {
        fn empty(dir: &Dir, depth: usize) -> Result<(), StoreError> {
            for entry in dir.entries()? {
                match entry.kind {
                    Kind::Dir if depth < SWEEP_MAX_DEPTH => {
                        if let Some(sub) = dir.subdir(&entry.name)? {
                            empty(&sub, depth + 1)?;
                        }
                        dir.remove_dir(&entry.name)?;
                    }
                    Kind::Dir => {
                        return Err(StoreError::Forbidden(format!(
                            "{} is nested deeper than the store ever writes",
                            dir.shown(&entry.name)
                        )));
                    }
                    _ => {
                        dir.remove_file(&entry.name)?;
                    }
                }
            }
            Ok(())
        }
        let Some(dir) = self.subdir(name)? else {
            return Ok(false);
        };
        empty(&dir, 0)?;
        self.remove_dir(name)
    }

    /// Removes the empty directory `name`; false if it is missing or not empty.
    pub(crate) fn remove_dir(&self, name: &str) -> Result<bool, StoreError> {
        self.check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST) => Ok(false),
            Err(errno) => Err(self.error(name, errno)),
        }
    }
}

/// A file name as UTF-8; the store writes only ASCII names, so others are not its own.
fn utf8_name(name: &CStr) -> Option<&str> {
    name.to_str().ok()
}

/// Appends `bytes` (whole lines) to `file` (opened for reading and appending) and fsyncs. A
/// torn last line left by a crash (no final newline) is cut off first, so an append never
/// glues onto garbage. Cost: the appended bytes plus one byte read, independent of the file
/// size. Returns the new length.
pub(crate) fn append_lines(file: &mut File, bytes: &[u8]) -> io::Result<u64> {
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            let keep = last_newline_end(file, len)?;
            file.set_len(keep)?;
        }
    }
    file.write_all(bytes)?;
    file.sync_data()?;
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
    file: &mut File,
    n: usize,
    mut accept: impl FnMut(&[u8]) -> bool,
) -> io::Result<Vec<Vec<u8>>> {
    let mut end = file.metadata()?.len();
    // Skip a torn last line.
    end = last_newline_end(file, end)?;
    let mut out: Vec<Vec<u8>> = Vec::new();
    while end > 0 && out.len() < n {
        let start = last_newline_end(file, end - 1)?;
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
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, Tree) {
        let dir = tempfile::tempdir().expect("tempdir");
        let tree = Tree::open(&dir.path().join("root")).expect("tree");
        (dir, tree)
    }

    #[test]
    fn append_repairs_a_torn_tail_and_tail_reads_backwards() -> Result<(), StoreError> {
        let (_tmp, tree) = tree();
        let dir = tree.create_dir("a/b")?;
        dir.append_lines("log.jsonl", b"one\ntwo\n")?;
        // A crash in the middle of a write leaves a line without its newline.
        dir.open_append("log.jsonl")?
            .write_all(b"tor")
            .map_err(StoreError::from)?;
        let mut file = dir.open_read("log.jsonl")?.expect("exists");
        assert_eq!(
            tail_lines(&mut file, 5, |_| true)?,
            vec![b"one".to_vec(), b"two".to_vec()]
        );
        dir.append_lines("log.jsonl", b"three\n")?;
        assert_eq!(dir.read("log.jsonl")?, Some(b"one\ntwo\nthree\n".to_vec()));
        let mut file = dir.open_read("log.jsonl")?.expect("exists");
        assert_eq!(
            tail_lines(&mut file, 2, |_| true)?,
            vec![b"two".to_vec(), b"three".to_vec()]
        );
        Ok(())
    }

    #[test]
    fn create_new_never_overwrites() -> Result<(), StoreError> {
        let (_tmp, tree) = tree();
        let dir = tree.create_dir("")?;
        assert!(dir.create_new("a.txt", b"first")?);
        assert!(!dir.create_new("a.txt", b"second")?);
        assert_eq!(dir.read("a.txt")?, Some(b"first".to_vec()));
        dir.replace("a.txt", b"third")?;
        assert_eq!(dir.read("a.txt")?, Some(b"third".to_vec()));
        // No temporary file is left behind.
        let names: Vec<String> = dir.entries()?.into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["a.txt".to_string()]);
        Ok(())
    }

    #[test]
    fn links_are_never_followed() -> Result<(), StoreError> {
        let (tmp, tree) = tree();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside)?;
        std::fs::write(outside.join("secret"), "secret")?;
        let root = tree.root().to_path_buf();
        std::fs::create_dir_all(root.join("real"))?;
        symlink(&outside, root.join("linked_dir"))?;
        symlink(outside.join("secret"), root.join("real/linked_file"))?;

        // A directory reached through a link: refused for reads and writes.
        for result in [
            tree.dir("linked_dir").map(|_| ()),
            tree.create_dir("linked_dir/new").map(|_| ()),
        ] {
            let err = result.expect_err("a link on the way");
            assert!(
                matches!(&err, StoreError::Forbidden(m) if m.contains("linked_dir is a symbolic link")),
                "{err:?}"
            );
        }
        // A file that is a link: refused for reads, appends and locks; listed as a link.
        let real = tree.dir("real")?.expect("exists");
        assert!(matches!(
            real.read("linked_file"),
            Err(StoreError::Forbidden(_))
        ));
        assert!(matches!(
            real.append_lines("linked_file", b"x\n"),
            Err(StoreError::Forbidden(_))
        ));
        assert!(matches!(
            real.lock("linked_file"),
            Err(StoreError::Forbidden(_))
        ));
        assert_eq!(
            real.entries()?,
            vec![Entry {
                name: "linked_file".into(),
                kind: Kind::Link,
                len: 0
            }]
        );
        // Creating over a link leaves the link (and its target) alone; replacing swaps the
        // link itself for a file.
        assert!(!real.create_new("linked_file", b"new")?);
        real.replace("linked_file", b"replaced")?;
        assert_eq!(std::fs::read_to_string(outside.join("secret"))?, "secret");
        assert_eq!(real.read("linked_file")?, Some(b"replaced".to_vec()));
        Ok(())
    }

    #[test]
    fn fifos_and_hostile_names_are_refused() -> Result<(), StoreError> {
        let (_tmp, tree) = tree();
        let dir = tree.create_dir("d")?;
        let fifo = tree.root().join("d/pipe");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .map_err(StoreError::from)?;
        assert!(status.success());
        // Opening a FIFO would block a reader forever; it is refused at once.
        assert!(matches!(dir.read("pipe"), Err(StoreError::Forbidden(_))));
        for name in ["", ".", "..", "a/b", "a\0b"] {
            assert!(
                matches!(dir.read(name), Err(StoreError::InvalidInput(_))),
                "{name:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn sweeps_remove_temp_files_of_dead_writers_only() -> Result<(), StoreError> {
        let (_tmp, tree) = tree();
        let dir = tree.create_dir("sessions/s1")?;
        // A process id that cannot run: above the kernel's maximum.
        let dead = ".state.json.4194304999.3.tmp";
        let mine = format!(".state.json.{}.4.tmp", std::process::id());
        for name in [dead, mine.as_str(), "state.json", ".context.lock", ".x.tmp"] {
            std::fs::write(tree.root().join("sessions/s1").join(name), "x")?;
        }
        assert_eq!(tree.sweep_temp_files()?, 1);
        let mut left: Vec<String> = dir.entries()?.into_iter().map(|e| e.name).collect();
        left.sort();
        assert_eq!(
            left,
            vec![".context.lock", mine.as_str(), ".x.tmp", "state.json"]
        );
        Ok(())
    }

    #[test]
    fn temp_names_carry_their_writer() {
        assert_eq!(temp_writer(".state.json.123.7.tmp"), Some(123));
        assert_eq!(temp_writer(&temp_name("a.b")), Some(std::process::id()));
        for other in ["state.json", ".lock", ".x.tmp", ".a.b.tmp", "a.1.2.tmp"] {
            assert_eq!(temp_writer(other), None, "{other}");
        }
    }
}
