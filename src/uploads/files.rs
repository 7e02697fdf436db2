//! Where an upload's files live: the blob store. [`BlobStore`] is what the rest of
//! yardmaster uses (the upload endpoint, script hosts, the result and file endpoints, the
//! cleaner); [`LocalFiles`], the default, keeps the blobs in a directory (`uploads.dir`),
//! one directory per job:
//!
//! ```text
//! jobs/<id>.partial/input/…   an upload still arriving (never read; removed if it fails)
//! jobs/<id>/input/…           the uploaded files, read-only once the job exists
//! jobs/<id>/result.zip        the archive of the last run's outputs and logs
//! ```
//!
//! Everything visible is complete: an upload is staged under `.partial` and renamed whole;
//! an archive is written to a temporary name and renamed. A crash leaves at most a staging
//! directory or a temporary file, which the cleaner removes. Nothing follows a link.
//!
//! Runs work elsewhere, on the host that runs them ([`super::workspace`]); a host with no
//! share of this store fetches the inputs and returns the archive over HTTP.

use std::fmt::Debug;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use uuid::Uuid;

/// Suffix of an upload still arriving.
const PARTIAL: &str = ".partial";
pub const RESULT_ZIP: &str = "result.zip";

/// The files of uploaded jobs and their result archives. Blocking calls: callers run them
/// on a blocking thread.
pub trait BlobStore: Send + Sync + Debug + 'static {
    /// Begins the files of an upload for job `id` (its row does not exist yet): none is
    /// visible before [`StagedUpload::commit`], and a dropped upload leaves none.
    fn stage(&self, id: Uuid) -> io::Result<Box<dyn StagedUpload>>;
    /// The uploaded files of job `id`, by normalised name with their sizes, sorted.
    fn inputs(&self, id: Uuid) -> io::Result<Vec<(String, u64)>>;
    /// One uploaded file (`NotFound` when the job has no such file).
    fn open_input(&self, id: Uuid, name: &str) -> io::Result<Blob>;
    /// Stores the finished archive at `archive` (a local file, consumed) as job `id`'s
    /// result, whole, in place of any earlier one.
    fn put_result(&self, id: Uuid, archive: &Path) -> io::Result<()>;
    /// The result archive (`NotFound` when there is none).
    fn open_result(&self, id: Uuid) -> io::Result<Blob>;
    /// Whether anything of job `id` is stored.
    fn holds(&self, id: Uuid) -> io::Result<bool>;
    /// Removes every blob of job `id`; true if there were any.
    fn remove(&self, id: Uuid) -> io::Result<bool>;
    /// Jobs with blobs, and uploads a crash left staged (`true`), with when they were last
    /// written, for the cleaner.
    fn entries(&self) -> io::Result<Vec<(Uuid, bool, SystemTime)>>;
    /// Removes an upload a crash left staged; true if there was one.
    fn remove_partial(&self, id: Uuid) -> io::Result<bool>;
}

/// An upload being written.
pub trait StagedUpload: Send + Debug {
    /// Creates the file of a normalised name (see [`super::names::normalise`]). A name
    /// that exists already fails.
    fn create(&self, name: &str) -> io::Result<Box<dyn BlobWriter>>;
    /// Makes the upload visible under its job's id, whole.
    fn commit(self: Box<Self>) -> io::Result<()>;
}

/// One file being written.
pub trait BlobWriter: Write + Send {
    /// Makes what was written durable.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

impl BlobWriter for std::fs::File {
    fn finish(self: Box<Self>) -> io::Result<()> {
        self.sync_all()
    }
}

/// A stored file, to read.
pub struct Blob {
    pub len: u64,
    pub reader: Box<dyn ReadSeek>,
}

pub trait ReadSeek: Read + Seek + Send {}
impl<T: Read + Seek + Send> ReadSeek for T {}

impl Blob {
    /// A regular file as a blob.
    pub fn file(file: std::fs::File) -> io::Result<Blob> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not a regular file"));
        }
        Ok(Blob { len: meta.len(), reader: Box::new(file) })
    }
}

/// The blob store in a local directory.
#[derive(Debug, Clone)]
pub struct LocalFiles {
    root: PathBuf,
}

impl LocalFiles {
    /// The store at `dir`, made on the first upload (a process that never stores one
    /// leaves no directory behind).
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        Ok(LocalFiles { root: std::path::absolute(dir.as_ref().join("jobs"))? })
    }

    /// The directory of a job's files.
    pub fn job_dir(&self, id: Uuid) -> PathBuf {
        self.root.join(id.to_string())
    }

    pub fn input_dir(&self, id: Uuid) -> PathBuf {
        self.job_dir(id).join("input")
    }

    pub fn result_path(&self, id: Uuid) -> PathBuf {
        self.job_dir(id).join(RESULT_ZIP)
    }
}

impl BlobStore for LocalFiles {
    fn stage(&self, id: Uuid) -> io::Result<Box<dyn StagedUpload>> {
        let dir = self.root.join(format!("{id}{PARTIAL}"));
        std::fs::create_dir_all(&self.root)?;
        std::fs::create_dir(&dir)?;
        std::fs::create_dir(dir.join("input"))?;
        Ok(Box::new(Staging { dir, target: self.job_dir(id), done: false }))
    }

    fn inputs(&self, id: Uuid) -> io::Result<Vec<(String, u64)>> {
        let mut skipped = Vec::new();
        let found = super::archive::walk(&self.input_dir(id), &mut skipped)?;
        found.into_iter().map(|(name, path)| Ok((name, std::fs::symlink_metadata(path)?.len()))).collect()
    }

    fn open_input(&self, id: Uuid, name: &str) -> io::Result<Blob> {
        let input = self.input_dir(id);
        Blob::file(open_inside(&input, &input.join(name))?)
    }

    fn put_result(&self, id: Uuid, archive: &Path) -> io::Result<()> {
        let target = self.result_path(id);
        if std::fs::rename(archive, &target).is_ok() {
            return Ok(());
        }
        // Another file system: copied whole, then renamed.
        replace_with(&target, |mut file| {
            io::copy(&mut std::fs::File::open(archive)?, &mut file)?;
            file.sync_all()
        })?;
        std::fs::remove_file(archive)
    }

    fn open_result(&self, id: Uuid) -> io::Result<Blob> {
        Blob::file(open_no_follow(&self.result_path(id))?)
    }

    fn holds(&self, id: Uuid) -> io::Result<bool> {
        match std::fs::symlink_metadata(self.job_dir(id)) {
            Ok(meta) => Ok(meta.is_dir()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn remove(&self, id: Uuid) -> io::Result<bool> {
        remove_tree(&self.job_dir(id))
    }

    fn entries(&self) -> io::Result<Vec<(Uuid, bool, SystemTime)>> {
        let mut found = Vec::new();
        let entries = match std::fs::read_dir(&self.root) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(found),
            entries => entries?,
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let (id, partial) = match name.strip_suffix(PARTIAL) {
                Some(id) => (id, true),
                None => (name, false),
            };
            let Ok(id) = id.parse::<Uuid>() else { continue };
            let modified = entry.metadata()?.modified()?;
            found.push((id, partial, modified));
        }
        Ok(found)
    }

    fn remove_partial(&self, id: Uuid) -> io::Result<bool> {
        remove_tree(&self.root.join(format!("{id}{PARTIAL}")))
    }
}

pub(super) fn remove_tree(dir: &Path) -> io::Result<bool> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

/// An upload being written to a [`LocalFiles`]. Dropped before it commits, it removes what
/// it wrote.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    target: PathBuf,
    done: bool,
}

impl StagedUpload for Staging {
    /// Creates the file and its directories; a link anywhere on the way fails.
    fn create(&self, name: &str) -> io::Result<Box<dyn BlobWriter>> {
        let path = self.dir.join("input").join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        Ok(Box::new(open_new(&path)?))
    }

    fn commit(mut self: Box<Self>) -> io::Result<()> {
        std::fs::rename(&self.dir, &self.target)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            if let Err(err) = std::fs::remove_dir_all(&self.dir) {
                tracing::warn!(dir = %self.dir.display(), error = %err, "could not remove a refused upload's files");
            }
        }
    }
}

/// Creates a file that must not exist, never through a link.
pub fn open_new(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Opens a file for reading, never through a link at its last component.
pub fn open_no_follow(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Opens a regular file under `dir`: never through a link at its last component, and only
/// when its real path lies in `dir` (a link among its parent directories cannot lead out).
pub fn open_inside(dir: &Path, path: &Path) -> io::Result<std::fs::File> {
    let file = open_no_follow(path)?;
    let inside = std::fs::canonicalize(path)?.starts_with(std::fs::canonicalize(dir)?);
    if !inside || !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::NotFound, "not a regular file of the job"));
    }
    Ok(file)
}

/// Writes `path` by writing a temporary file beside it and renaming it over, so a reader
/// sees the old file or the new one, whole.
pub fn replace_with(path: &Path, write: impl FnOnce(std::fs::File) -> io::Result<()>) -> io::Result<()> {
    let temporary = path.with_extension(format!("tmp-{}", Uuid::new_v4().simple()));
    let written = open_new(&temporary).and_then(write).and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}
