//! A throwaway `redis-server` for the integration tests (as `crates/state/src/redis/test_server.rs`
//! is for the unit tests): Debian's binary on a free loopback port (never 6379), no
//! persistence, killed when dropped; [`RedisServer::kill`] and [`RedisServer::restart`] (same
//! port, empty) for the outage tests. A machine without `redis-server` fails the test with the
//! install command; it never skips.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a started server may take to answer `PING`.
const START_WAIT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start one on a free loopback port.
    pub fn start() -> Self {
        for _ in 0..5 {
            let port = super::free_port();
            assert_ne!(port, 6379);
            let dir = tempfile::tempdir().unwrap();
            let mut s = Self {
                child: spawn(port, dir.path()),
                port,
                dir,
            };
            if s.wait_ready() {
                return s;
            }
        }
        panic!("redis-server did not start on a free loopback port after 5 tries");
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kill it with SIGKILL, as a crash: nothing flushed, connections reset.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            self.child = spawn(self.port, self.dir.path());
            if self.wait_ready() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not start again on port {}", self.port);
    }

    /// A plain client connection, to look at or tamper with the stored keys.
    pub fn raw(&self) -> ::redis::Connection {
        ::redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + START_WAIT;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if ping(self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(port: u16, dir: &std::path::Path) -> Child {
    let spawned = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    match spawned {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "redis-server is not installed: the Redis tests need Debian's redis-server \
             (apt-get install redis-server; scripts/test.sh installs it)"
        ),
        Err(e) => panic!("cannot start redis-server: {e}"),
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}
