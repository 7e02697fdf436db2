//! The service speaks systemd's notify protocol: READY once serving, STOPPING on SIGTERM,
//! then a graceful exit with 143.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use uuid::Uuid;

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
