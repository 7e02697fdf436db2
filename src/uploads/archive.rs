//! Preparing a run's working directory from the upload, and zipping what the run made.
//!
//! The working directory starts as a copy of the uploaded files, so a retry runs on the
//! files as they were uploaded. The archive holds every regular file the run created or
//! changed (an input left as it was is not sent back) and the run's logs under
//! `.yardmaster/`. Links are never followed, neither when copying nor when zipping: a link
//! the script made to `/etc/passwd` is left out, its target never read.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::files::{open_no_follow, BlobStore};

use uuid::Uuid;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

/// Where the logs go inside the archive.
pub const LOGS_DIR: &str = ".yardmaster";

/// The files a run started with: relative name → (length, modification time).
pub type Manifest = BTreeMap<String, (u64, SystemTime)>;

/// What an archive holds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Packed {
    /// The run's output files, by name, with their sizes.
    pub files: BTreeMap<String, u64>,
    /// Links and other non-files left out.
    pub skipped: Vec<String>,
    /// The archive's size.
    pub zip_bytes: u64,
}

/// Copies job `id`'s upload from the blob store into a fresh `work` directory; answers what
/// it copied.
pub fn prepare(blobs: &dyn BlobStore, id: Uuid, work: &Path) -> io::Result<Manifest> {
    fs::create_dir_all(work)?;
    let mut manifest = Manifest::new();
    for (name, _) in blobs.inputs(id)? {
        let target = work.join(&name);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut from = blobs.open_input(id, &name)?;
        let mut to = super::files::open_new(&target)?;
        io::copy(&mut from.reader, &mut to)?;
        drop(to);
        let meta = fs::symlink_metadata(&target)?;
        manifest.insert(name, (meta.len(), meta.modified()?));
    }
    Ok(manifest)
}

/// Writes `zip_path` (whole, or not at all) with the files of `work` the run made or
/// changed, and the logs in `logs` (`stdout`, `stderr`).
pub fn pack(work: &Path, logs: &Path, started_with: &Manifest, zip_path: &Path) -> io::Result<Packed> {
    let mut skipped = Vec::new();
    let mut outputs = Vec::new();
    for (name, path) in walk(work, &mut skipped)? {
        let meta = fs::symlink_metadata(&path)?;
        let unchanged = started_with.get(&name) == Some(&(meta.len(), meta.modified()?));
        if !unchanged && !name.starts_with(&format!("{LOGS_DIR}/")) {
            outputs.push((name, path, meta.len()));
        }
    }
    let mut packed = Packed { skipped, ..Packed::default() };
    super::files::replace_with(zip_path, |file| {
        let mut zip = ZipWriter::new(io::BufWriter::new(file));
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated).large_file(true);
        for (name, path, len) in &outputs {
            // Opened without following a link: a file swapped for one since the walk fails.
            let mut source = open_no_follow(path)?;
            zip.start_file(name.as_str(), options).map_err(io::Error::other)?;
            io::copy(&mut source, &mut zip)?;
            packed.files.insert(name.clone(), *len);
        }
        for log in ["stdout", "stderr"] {
            zip.start_file(format!("{LOGS_DIR}/{log}.txt"), options).map_err(io::Error::other)?;
            if let Ok(mut source) = open_no_follow(&logs.join(log)) {
                io::copy(&mut source, &mut zip)?;
            }
        }
        let mut writer = zip.finish().map_err(io::Error::other)?;
        writer.flush()?;
        writer.get_ref().sync_all()
    })?;
    packed.zip_bytes = fs::metadata(zip_path)?.len();
    Ok(packed)
}

/// The regular files under `root` as `(relative name, path)`, sorted, without following
/// links; what is neither a file nor a directory is named in `skipped`.
pub fn walk(root: &Path, skipped: &mut Vec<String>) -> io::Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    let mut pending = vec![(String::new(), root.to_path_buf())];
    while let Some((prefix, dir)) = pending.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                skipped.push(format!("{prefix}{}", entry.file_name().to_string_lossy()));
                continue;
            };
            let relative = format!("{prefix}{name}");
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push((format!("{relative}/"), entry.path()));
            } else if kind.is_file() {
                found.push((relative, entry.path()));
            } else {
                skipped.push(relative);
            }
        }
    }
    found.sort();
    skipped.sort();
    Ok(found)
}
