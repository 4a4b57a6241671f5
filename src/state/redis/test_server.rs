//! A throwaway `redis-server` for the tests: Debian's binary on a free loopback port (never
//! 6379), no persistence (`--save '' --appendonly no`), killed when dropped. A machine without
//! `redis-server` fails the test that needs it, with the install command; it never skips.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::RedisUrl;

/// How long a started server may take to answer `PING`.
const START_WAIT: Duration = Duration::from_secs(20);

/// A running `redis-server`, killed on drop.
pub(crate) struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start one with the default settings.
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    /// Start one with `extra` arguments (`--enable-debug-command yes`, ...).
    pub(crate) fn start_with(extra: &[&str]) -> Self {
        for _ in 0..5 {
            if let Some(s) = Self::try_start(extra) {
                return s;
            }
        }
        panic!("redis-server did not start on a free loopback port after 5 tries");
    }

    fn try_start(extra: &[&str]) -> Option<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        assert_ne!(port, 6379);
        let dir = tempfile::tempdir().unwrap();
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed: the Redis backend's tests need Debian's \
                 redis-server (apt-get install redis-server; scripts/test.sh installs it)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        let mut server = Self {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + START_WAIT;
        while Instant::now() < deadline {
            if server.child.try_wait().ok().flatten().is_some() {
                return None; // exited: the port was taken meanwhile
            }
            if server.ping() {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// `redis://127.0.0.1:PORT/DB`.
    pub(crate) fn url(&self, db: u8) -> RedisUrl {
        RedisUrl::parse(&format!("redis://127.0.0.1:{}/{db}", self.port)).unwrap()
    }

    /// A plain (synchronous) client connection, for a test to look at or tamper with the
    /// stored keys.
    pub(crate) fn raw(&self) -> ::redis::Connection {
        ::redis::Client::open(self.url(0).expose())
            .unwrap()
            .get_connection()
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
