//! Where an upload's files live: the blob store. [`LocalFiles`] keeps them in a directory
//! (`uploads.dir`), one directory per job:
//!
//! ```text
//! jobs/<id>.partial/input/…   an upload still arriving (never read; removed if it fails)
//! jobs/<id>/input/…           the uploaded files, read-only once the job exists
//! jobs/<id>/runs/<n>/work/    run n's working directory: a fresh copy of the input
//! jobs/<id>/runs/<n>/stdout   its captured output (capped)
//! jobs/<id>/result.zip        the archive of the last run's outputs and logs
//! ```
//!
//! Everything visible is complete: an upload is staged under `.partial` and renamed whole;
//! an archive is written to a temporary name and renamed. A crash leaves at most a staging
//! directory or a temporary file, which the cleaner removes. Nothing follows a link.

use std::io;
use std::path::{Path, PathBuf};

use uuid::Uuid;

/// Suffix of an upload still arriving.
const PARTIAL: &str = ".partial";
pub const RESULT_ZIP: &str = "result.zip";

/// The blob store of uploads in a local directory.
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

    /// Run `attempt`'s directory (its `work/` and logs).
    pub fn run_dir(&self, id: Uuid, attempt: i32) -> PathBuf {
        self.job_dir(id).join("runs").join(attempt.to_string())
    }

    pub fn result_path(&self, id: Uuid) -> PathBuf {
        self.job_dir(id).join(RESULT_ZIP)
    }

    /// Begins the files of an upload for job `id` (its row does not exist yet).
    pub fn stage(&self, id: Uuid) -> io::Result<Staging> {
        let dir = self.root.join(format!("{id}{PARTIAL}"));
        std::fs::create_dir_all(&self.root)?;
        std::fs::create_dir(&dir)?;
        std::fs::create_dir(dir.join("input"))?;
        Ok(Staging { dir, target: self.job_dir(id), done: false })
    }

    /// Removes every file of a job; true if there were any.
    pub fn remove(&self, id: Uuid) -> io::Result<bool> {
        remove_tree(&self.job_dir(id))
    }

    /// Entries of the store's top directory: job ids, and staging directories left by a
    /// crash (`true`), for the cleaner.
    pub fn entries(&self) -> io::Result<Vec<(Uuid, bool, std::time::SystemTime)>> {
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

    /// Removes a staging directory a crash left behind.
    pub fn remove_partial(&self, id: Uuid) -> io::Result<bool> {
        remove_tree(&self.root.join(format!("{id}{PARTIAL}")))
    }
}

fn remove_tree(dir: &Path) -> io::Result<bool> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

/// An upload being written. Dropped before [`Staging::commit`], it removes what it wrote.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    target: PathBuf,
    done: bool,
}

impl Staging {
    /// Creates the file of a normalised name (see [`super::names::normalise`]) and its
    /// directories. A name that exists already, or a link anywhere on the way, fails.
    pub fn create(&self, name: &str) -> io::Result<std::fs::File> {
        let path = self.dir.join("input").join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        open_new(&path)
    }

    /// Makes the upload visible under its job's id, whole.
    pub fn commit(mut self) -> io::Result<()> {
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
