//! Where runs work: a local directory on the host that runs them, apart from the blob
//! store (which may be elsewhere), one directory per job:
//!
//! ```text
//! runs/<id>/<n>/work/     run n's working directory: a fresh copy of the upload
//! runs/<id>/<n>/stdout    its captured output (capped), and stderr
//! runs/<id>/result-*.zip  an archive on its way into the blob store
//! ```
//!
//! A job's runs stay until its files are cleaned, so `GET /jobs/{id}/files/{path}` reads
//! what the last run made, during the run and after it.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use uuid::Uuid;

/// The runs of this host.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// The workspace at `<dir>/runs`, made by the first run.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Workspace { root: std::path::absolute(dir.as_ref().join("runs"))? })
    }

    /// Every run of job `id`.
    pub fn job_dir(&self, id: Uuid) -> PathBuf {
        self.root.join(id.to_string())
    }

    /// Run `attempt`'s directory (its `work/` and logs).
    pub fn run_dir(&self, id: Uuid, attempt: i32) -> PathBuf {
        self.job_dir(id).join(attempt.to_string())
    }

    /// Removes every run of a job; true if there were any.
    pub fn remove(&self, id: Uuid) -> io::Result<bool> {
        super::files::remove_tree(&self.job_dir(id))
    }

    /// Jobs with runs here, with when their directory last changed, for the cleaner.
    pub fn entries(&self) -> io::Result<Vec<(Uuid, SystemTime)>> {
        let entries = match std::fs::read_dir(&self.root) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            entries => entries?,
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Some(id) = entry.file_name().to_str().and_then(|name| name.parse::<Uuid>().ok()) else { continue };
            found.push((id, entry.metadata()?.modified()?));
        }
        Ok(found)
    }
}
