//! The service speaks systemd's notify protocol: READY once serving, STOPPING on SIGTERM,
//! then a graceful exit with 143.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use uuid::Uuid;

use crate::helpers::eventually;

fn receive(socket: &UnixDatagram) -> String {
    let mut buffer = [0u8; 512];
    let size = socket.recv(&mut buffer).expect("a notification within the timeout");
    String::from_utf8_lossy(&buffer[..size]).into_owned()
}

#[actix_rt::test]
async fn systemd_hears_ready_then_stopping_and_the_exit_is_143() {
    let dir = std::env::temp_dir().join(format!("yardmaster-notify-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_yardmaster"))
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("YARDMASTER__STORE__URL", format!("sqlite://{}?mode=rwc", dir.join("ym.db").display()))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    let (socket, ready) = actix_rt::task::spawn_blocking(move || {
        let message = receive(&socket);
        (socket, message)
    })
    .await
    .unwrap();
    assert!(ready.contains("READY=1"), "{ready:?}");

    // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let stopping = actix_rt::task::spawn_blocking(move || receive(&socket)).await.unwrap();
    assert!(stopping.contains("STOPPING=1"), "{stopping:?}");
    let status = actix_rt::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With `WATCHDOG_USEC` set, the process feeds systemd's watchdog: `WATCHDOG=1` every half
/// period. No `WATCHDOG_PID` is set (the child's pid is unknown before it is spawned), which
/// sd_notify reads as "this process".
#[actix_rt::test]
async fn systemd_hears_watchdog_pings_while_serving() {
    let dir = std::env::temp_dir().join(format!("yardmaster-watchdog-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // Taken before the spawn: every ping is sent after it, and reading one late only adds
    // to the time measured from it.
    let spawned = std::time::Instant::now();
    // Killed when dropped, should the test fail before it stops.
    let mut child = crate::amqp_processes::Process(
        Command::new(env!("CARGO_BIN_EXE_yardmaster"))
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env("NOTIFY_SOCKET", &socket_path)
            .env("WATCHDOG_USEC", "400000")
            .env_remove("WATCHDOG_PID")
            .env("YARDMASTER__STORE__URL", format!("sqlite://{}?mode=rwc", dir.join("ym.db").display()))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // Pings after READY, each 200 ms (half the period) after the one before, the first 200 ms
    // after the process started: the fifth is sent a second or more after the spawn. Spaced
    // by when they are read instead, a late reader would find them queued up, as a burst.
    // Pings in a burst (or too fast) would all be in well before, start-up being quicker.
    const PINGS: u32 = 5;
    let (socket, last) = actix_rt::task::spawn_blocking(move || {
        let mut ready = false;
        let mut pings = 0;
        while pings < PINGS {
            let message = receive(&socket);
            ready |= message.contains("READY=1");
            if ready && message.contains("WATCHDOG=1") {
                pings += 1;
            }
        }
        (socket, std::time::Instant::now())
    })
    .await
    .unwrap();
    let spread = last - spawned;
    assert!(spread >= PINGS * Duration::from_millis(200), "{PINGS} pings {spread:?} after the spawn: a burst");

    // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
    unsafe {
        libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM);
    }
    let status = actix_rt::task::spawn_blocking(move || child.0.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    drop(socket);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `yardmaster serve` on an embedded store, its log lines read as they come.
struct Served {
    child: std::process::Child,
    port: u16,
    /// Its admin token (the bootstrap token it was started with).
    token: String,
    log: std::sync::mpsc::Receiver<String>,
    dir: std::path::PathBuf,
}

impl Served {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Served {
        let dir = std::env::temp_dir().join(format!("yardmaster-stop-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Served::start_in(dir, args, env)
    }

    /// As [`Served::start`], on the store already in `dir` (a restart).
    fn start_in(dir: std::path::PathBuf, args: &[&str], env: &[(&str, &str)]) -> Served {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let token = crate::helpers::new_token();
        let mut child = Command::new(env!("CARGO_BIN_EXE_yardmaster"))
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .args(args)
            .env("YARDMASTER__STORE__URL", format!("sqlite://{}?mode=rwc", dir.join("ym.db").display()))
            .env("YARDMASTER__WORKER__GRACE_SECONDS", "1")
            .env("YARDMASTER__AUTH__BOOTSTRAP_TOKEN", &token)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (lines, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let served = Served { child, port, token, log, dir };
        served.wait_for_log("started port");
        served
    }

    /// Waits for a log line containing `needle`; every line read on the way is returned.
    fn wait_for_log(&self, needle: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.log.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("no log line with {needle:?}; saw {seen:#?}"),
            }
        }
    }

    /// The rest of the log, once the process has exited.
    fn rest_of_log(&self) -> Vec<String> {
        self.log.iter().collect()
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, signal);
        }
    }

    fn wait(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let status = self.child.wait().unwrap();
        let log = self.rest_of_log();
        let _ = std::fs::remove_dir_all(&self.dir);
        (status, log)
    }
}

#[actix_rt::test]
async fn sigterm_answers_the_request_under_way_before_exiting() {
    // A grace far longer than the request takes, however slow the machine: the drain still
    // ends when the request does, and a 1 s one could cut it short before the body's rest
    // arrives.
    let env = [("RUST_LOG", "info,yardmaster::http=trace"), ("YARDMASTER__WORKER__GRACE_SECONDS", "20")];
    let served = Served::start(&["--no-workers"], &env);
    let (port, token) = (served.port, served.token.clone());
    let (served, answer) = actix_rt::task::spawn_blocking(move || {
        use std::io::{Read as _, Write as _};
        let body = br#"{"operation": "ping"}"#;
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // One answered request first: the server has taken the connection in.
        stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n").unwrap();
        let mut buffer = [0u8; 1024];
        let mut first = Vec::new();
        while !String::from_utf8_lossy(&first).contains("\"ok\"") {
            let n = stream.read(&mut buffer).unwrap();
            assert!(n > 0, "closed before answering /healthz");
            first.extend_from_slice(&buffer[..n]);
        }
        let head = format!(
            "POST /jobs HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {token}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body[..5]).unwrap();
        served.wait_for_log("POST /jobs");
        served.signal(libc::SIGTERM);
        let seen = served.wait_for_log("shutting down");
        // The request was under way when the signal came: it is still answered.
        stream.write_all(&body[5..]).unwrap();
        let mut answer = Vec::new();
        let mut end = String::new();
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
                Err(err) => {
                    end = err.to_string();
                    break;
                }
            }
        }
        (served, format!("{}\nend: {end}\n{seen:#?}", String::from_utf8_lossy(&answer)))
    })
    .await
    .unwrap();
    let (status, log) = actix_rt::task::spawn_blocking(move || served.wait()).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer:.300} {log:#?}");
    assert_eq!(status.code(), Some(143), "{status:?}");
}

#[actix_rt::test]
async fn sigterm_stops_the_runs_it_requeues_and_exits_cleanly() {
    let served = Served::start(&[], &[]);
    let client = crate::helpers::client_with(&served.token);
    let url = format!("http://127.0.0.1:{}/jobs", served.port);
    let job: serde_json::Value = client
        .post(&url)
        .json(&serde_json::json!({ "operation": "sleep", "payload": { "seconds": 60, "steps": 1 } }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    let served = actix_rt::task::spawn_blocking(move || {
        served.wait_for_log("claimed");
        served.signal(libc::SIGTERM);
        served
    })
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let (status, log) = actix_rt::task::spawn_blocking(move || served.wait()).await.unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}: {log:#?}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?} with a 1 s grace", started.elapsed());
    assert!(log.iter().any(|line| line.contains("re-queued on shutdown") && line.contains(&id)), "{log:#?}");
    assert!(!log.iter().any(|line| line.contains("did not stop")), "the abandoned run kept going: {log:#?}");
    // The run was told to stop and ended before the exit; its late outcome was refused.
    let ended = |line: &&String| line.contains("outcome dropped") && line.contains(&id);
    assert!(log.iter().any(|line| ended(&line)), "the abandoned run never ended: {log:#?}");
    assert!(!log.iter().any(|line| line.contains("panicked")), "{log:#?}");
}

#[actix_rt::test]
async fn a_killed_embedded_service_reruns_the_coordinator_whose_batches_it_held() {
    let served = Served::start(&[], &[]);
    let client = crate::helpers::client_with(&served.token);
    let base = format!("http://127.0.0.1:{}", served.port);
    // 40 batches of a second each, 4 at a time: about 10 s of batches, still mostly pending
    // when the SIGKILL below comes, however late it is read and sent.
    let payload = serde_json::json!({ "start": 1, "end": 40, "batch_size": 1, "batch_delay_ms": 1000 });
    let job: serde_json::Value = client
        .post(format!("{base}/jobs"))
        .json(&serde_json::json!({ "operation": "sum_squares", "payload": payload }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    // Killed once it has deferred, with most batches still in its memory.
    let served = actix_rt::task::spawn_blocking(move || {
        served.wait_for_log("fanned out");
        served.signal(libc::SIGKILL);
        served
    })
    .await
    .unwrap();
    let dir = served.dir.clone();
    let mut child = served.child;
    child.wait().unwrap();

    let restarted = Served::start_in(dir, &[], &[]);
    let base = format!("http://127.0.0.1:{}", restarted.port);
    let done = eventually("the coordinator finished after the restart", Duration::from_secs(60), || async {
        let job: serde_json::Value =
            client.get(format!("{base}/jobs/{id}")).send().await.unwrap().json().await.unwrap();
        (job["status"] != "running" && job["status"] != "queued").then_some(job)
    })
    .await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["result"], serde_json::json!({ "batches": 40, "sum": 22_140 }));
    let events: serde_json::Value =
        client.get(format!("{base}/jobs/{id}/events?limit=500")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> = events["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert!(names.contains(&"job.requeued_batches_lost"), "{names:?}");
    restarted.signal(libc::SIGTERM);
    actix_rt::task::spawn_blocking(move || restarted.wait()).await.unwrap();
}

#[actix_rt::test]
/// Waiting clients get an answer, not a reset connection: the long-poll the job as it is,
/// the streams their end (to resume elsewhere with Last-Event-ID), well within the grace.
async fn sigterm_answers_waiting_clients_before_exiting() {
    // A grace long enough that waiting it out would show.
    let env = [("YARDMASTER__WORKER__GRACE_SECONDS", "20"), ("RUST_LOG", "info,yardmaster::http=trace")];
    let served = Served::start(&["--no-workers"], &env);
    let base = format!("http://127.0.0.1:{}", served.port);
    let client = crate::helpers::client_with(&served.token);
    let body = serde_json::json!({ "operation": "ping" });
    let job: serde_json::Value =
        client.post(format!("{base}/jobs")).json(&body).send().await.unwrap().json().await.unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    let mut room = client.get(format!("{base}/rooms/default/events/stream")).send().await.unwrap();
    assert!(room.chunk().await.unwrap().is_some(), "the room stream sent its first event");
    let mut stream = client.get(format!("{base}/jobs/{id}/events/stream")).send().await.unwrap();
    assert!(stream.chunk().await.unwrap().is_some(), "the job stream sent its first event");
    let poll = actix_rt::spawn(client.get(format!("{base}/jobs/{id}")).header("prefer", "wait=60").send());
    // The long-poll's own line (the stream's path goes on past the id), read off this
    // thread, which must go on sending the long-poll.
    let needle = format!("request: GET /jobs/{id} ");
    let served = actix_rt::task::spawn_blocking(move || {
        served.wait_for_log(&needle);
        served
    })
    .await
    .unwrap();
    let signalled = std::time::Instant::now();
    served.signal(libc::SIGTERM);
    // The long-poll answers with the job as it is; both streams end.
    let answered = poll.await.unwrap().unwrap();
    assert_eq!(answered.status(), 200);
    let job: serde_json::Value = answered.json().await.unwrap();
    assert_eq!(job["status"], "queued");
    for mut open in [room, stream] {
        while open.chunk().await.unwrap().is_some() {}
    }
    let (status, log) = actix_rt::task::spawn_blocking(move || served.wait()).await.unwrap();
    assert_eq!(status.code(), Some(143), "{status:?} {log:#?}");
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(10), "the drain waited {took:?} for clients that wait");
}
