//! Which server the command line talks to, and with which token: a flag, else the
//! environment (`YARDMASTER_URL`, `YARDMASTER_TOKEN`), else the client file
//! (`$YARDMASTER_CLIENT_CONFIG`, else `$XDG_CONFIG_HOME/yardmaster/client.toml`, else
//! `~/.config/yardmaster/client.toml`), else `http://127.0.0.1:8080` and no token.

use std::path::PathBuf;

use serde::Deserialize;

/// The server address when nothing names one: `yardmaster serve`'s default bind.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// What the client file may hold.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    pub url: Option<String>,
    pub token: Option<String>,
}

/// The server and token to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: String,
    pub token: Option<String>,
}

/// Where the client file is looked for.
pub fn file_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("YARDMASTER_CLIENT_CONFIG") {
        return Some(PathBuf::from(path));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
    Some(base.join("yardmaster").join("client.toml"))
}

/// Reads the client file at `path`; a missing file is an empty one, a broken one an error.
pub fn read_file(path: &std::path::Path) -> anyhow::Result<ClientFile> {
    use figment::providers::{Format as _, Toml};
    if !path.exists() {
        return Ok(ClientFile::default());
    }
    figment::Figment::from(Toml::file_exact(path))
        .extract()
        .map_err(|err| anyhow::anyhow!("client settings {}: {err}", path.display()))
}

/// The target from the flags or environment (`url`, `token`, as clap read them) over the
/// client file.
pub fn resolve(url: Option<String>, token: Option<String>) -> anyhow::Result<Target> {
    let file = match file_path() {
        Some(path) if url.is_none() || token.is_none() => read_file(&path)?,
        _ => ClientFile::default(),
    };
    let url = url.or(file.url).unwrap_or_else(|| DEFAULT_URL.to_owned());
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        anyhow::bail!("the server URL must start with http:// or https://, not {url:?}");
    }
    let token = token.or(file.token).filter(|token| !token.is_empty());
    Ok(Target { url, token })
}
