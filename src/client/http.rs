//! The API as the command line calls it: typed requests over `reqwest`, and every answer
//! that is not a success turned into a [`ClientError`] that says what the server said (its
//! problem's title and detail), not what the bytes were.

use std::fmt;
use std::path::Path;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::domain::{JobEvent, JobSummary};

/// What went wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused, with an RFC 9457 problem.
    #[error("{0}")]
    Problem(Problem),
    /// The server answered something that is neither the expected body nor a problem.
    #[error("HTTP {status} from {url}: {body}")]
    Unexpected { status: u16, url: String, body: String },
    /// No answer: the server is not there, or the connection broke.
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// Something on this side (a file to upload, to write).
    #[error("{0}")]
    Local(String),
}

impl ClientError {
    /// Worth trying again: the server is away or restarting (not a refusal).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Problem(problem) => matches!(problem.status, 502..=504),
            ClientError::Unexpected { status, .. } => matches!(status, 502..=504),
            ClientError::Local(_) => false,
        }
    }
}

/// An RFC 9457 problem as the server sends it.
#[derive(Debug, Clone, Deserialize)]
pub struct Problem {
    pub title: String,
    pub status: u16,
    #[serde(default)]
    pub detail: String,
    #[serde(default)]
    pub code: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.title)?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        write!(f, " ({}, HTTP {})", self.code, self.status)
    }
}

/// A page of `GET /jobs`.
#[derive(Debug, Deserialize)]
pub struct JobPage {
    pub jobs: Vec<JobSummary>,
    pub next_cursor: Option<Uuid>,
}

/// A document the server sent, read as `T` (the command prints the document itself).
pub fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, ClientError> {
    T::deserialize(value).map_err(|err| ClientError::Unexpected {
        status: 200,
        url: String::new(),
        body: format!("{err}: {}", truncate(&value.to_string(), 200)),
    })
}

fn truncate(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// A page of `GET /jobs/{id}/events`.
#[derive(Debug, Deserialize)]
pub struct EventPage {
    pub events: Vec<JobEvent>,
    #[serde(default)]
    pub next_after: Option<i64>,
}

/// Filters of `GET /jobs`.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ListFilter {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_job_id: Option<Uuid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Uuid>,
}

/// A server at `url`, called with `token`.
#[derive(Debug, Clone)]
pub struct Client {
    url: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(url: &str, token: Option<&str>) -> Result<Client, ClientError> {
        let mut headers = HeaderMap::new();
        if let Some(token) = token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| ClientError::Local("the token holds characters a header cannot carry".into()))?;
            headers.insert(AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .pool_idle_timeout(crate::http::CLIENT_IDLE)
            .user_agent(concat!("yardmaster-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| ClientError::Local(format!("cannot build the HTTP client: {err}")))?;
        Ok(Client { url: url.trim_end_matches('/').to_owned(), http })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.url(path))
    }

    /// Sends `request`; a response with a success status, else the error it stands for.
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        let url = request
            .try_clone()
            .and_then(|request| request.build().ok())
            .map_or_else(|| self.url.clone(), |request| request.url().to_string());
        let response =
            request.send().await.map_err(|err| ClientError::Unreachable { url: url.clone(), reason: reason(&err) })?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(refusal(response, url).await)
    }

    async fn json<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, ClientError> {
        let response = self.send(request).await?;
        let url = response.url().to_string();
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|err| ClientError::Unreachable { url: url.clone(), reason: reason(&err) })?;
        serde_json::from_slice(&bytes).map_err(|err| ClientError::Unexpected {
            status,
            url,
            body: format!("{err}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(200)])),
        })
    }

    /// A request with an optional JSON body, answered with JSON.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, ClientError> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        self.json(request).await
    }

    pub async fn submit(&self, body: &Value) -> Result<Value, ClientError> {
        self.json(self.request(Method::POST, "/jobs").json(body)).await
    }

    pub async fn job(&self, id: Uuid) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, &format!("/jobs/{id}"))).await
    }

    pub async fn list(&self, filter: &ListFilter) -> Result<Value, ClientError> {
        self.json(self.request(Method::GET, "/jobs").query(filter)).await
    }

    pub async fn cancel(&self, id: Uuid) -> Result<Value, ClientError> {
        self.json(self.request(Method::POST, &format!("/jobs/{id}/cancel"))).await
    }

    pub async fn retry(&self, id: Uuid) -> Result<Value, ClientError> {
        self.json(self.request(Method::POST, &format!("/jobs/{id}/retry"))).await
    }

    /// Events after `after`, a page at a time.
    pub async fn events(&self, id: Uuid, after: Option<i64>) -> Result<EventPage, ClientError> {
        let mut request = self.request(Method::GET, &format!("/jobs/{id}/events"));
        if let Some(after) = after {
            request = request.query(&[("after", after)]);
        }
        self.json(request).await
    }

    /// The event stream of job `id`, resumed after event `after`.
    pub async fn stream(&self, id: Uuid, after: Option<i64>) -> Result<Response, ClientError> {
        let mut request =
            self.request(Method::GET, &format!("/jobs/{id}/events/stream")).header("Accept", "text/event-stream");
        if let Some(after) = after {
            request = request.header("Last-Event-ID", after.to_string());
        }
        self.send(request).await
    }

    /// Uploads `files` (each a path on disk and its name in the upload) for `service`.
    pub async fn upload(
        &self,
        service: &str,
        room: Option<&str>,
        files: &[(std::path::PathBuf, String)],
    ) -> Result<Value, ClientError> {
        let mut form = reqwest::multipart::Form::new().text("service", service.to_owned());
        if let Some(room) = room {
            form = form.text("room", room.to_owned());
        }
        for (path, name) in files {
            let part = reqwest::multipart::Part::file(path)
                .await
                .map_err(|err| ClientError::Local(format!("cannot read {}: {err}", path.display())))?
                .file_name(name.clone());
            form = form.part("files", part);
        }
        self.json(self.request(Method::POST, "/uploads").multipart(form)).await
    }

    /// Writes job `id`'s result archive to `out` (through a temporary file beside it, so a
    /// broken download leaves no half archive under the name asked for).
    pub async fn download_result(&self, id: Uuid, out: &Path) -> Result<u64, ClientError> {
        use futures_util::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;

        let response = self.send(self.request(Method::GET, &format!("/jobs/{id}/result"))).await?;
        if response.status() != StatusCode::OK {
            return Err(ClientError::Local(format!("job {id} has no result yet (HTTP {})", response.status())));
        }
        let partial = out.with_extension("partial");
        let local = |err: std::io::Error| ClientError::Local(format!("cannot write {}: {err}", out.display()));
        let mut file = tokio::fs::File::create(&partial).await.map_err(local)?;
        let mut written = 0u64;
        let mut body = response.bytes_stream();
        while let Some(piece) = body.next().await {
            let piece =
                piece.map_err(|err| ClientError::Unreachable { url: self.url.clone(), reason: reason(&err) })?;
            file.write_all(&piece).await.map_err(local)?;
            written += piece.len() as u64;
        }
        file.sync_all().await.map_err(local)?;
        tokio::fs::rename(&partial, out).await.map_err(local)?;
        Ok(written)
    }
}

/// The error a refused request stands for: its problem, when the body is one.
async fn refusal(response: Response, url: String) -> ClientError {
    let status = response.status().as_u16();
    let is_problem = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/problem+json"));
    let body = response.bytes().await.unwrap_or_default();
    if is_problem {
        if let Ok(problem) = serde_json::from_slice::<Problem>(&body) {
            return ClientError::Problem(problem);
        }
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]).trim().to_owned();
    ClientError::Unexpected { status, url, body: text }
}

/// A transport error's cause, without reqwest's wrapping.
fn reason(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}
