//! A real server's side of the differential test: plain TCP connections that write requests as
//! redis-rs packs them and read replies with redis-rs's own parser (pushes included, which a
//! redis-rs connection would route elsewhere), plus a connection of its own for `TIME`.

use std::net::TcpStream;
use std::time::Duration;

use redis::{Parser, Value};

use crate::common::RedisServer;

/// How long one reply may take before the test fails: far above a local round trip, even on a
/// loaded 2-core machine; reached only when the model expects a frame the server never sends.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a restarted server may take to load its few keys: seconds on a loaded machine.
const LOAD_DEADLINE: Duration = Duration::from_secs(30);

/// One connection to the server.
pub struct Wire {
    stream: TcpStream,
    parser: Parser,
}

impl Wire {
    pub fn open(port: u16) -> Wire {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Wire {
            stream,
            parser: Parser::new(),
        }
    }

    pub fn send(&mut self, argv: &[Vec<u8>]) {
        self.send_all(&[argv]);
    }

    /// Several commands in one write (a pipeline).
    pub fn send_all(&mut self, commands: &[&[Vec<u8>]]) {
        use std::io::Write;
        let mut pipe = redis::pipe();
        for argv in commands {
            let cmd = pipe.cmd(std::str::from_utf8(&argv[0]).unwrap());
            for arg in &argv[1..] {
                cmd.arg(arg.as_slice());
            }
        }
        self.stream.write_all(&pipe.get_packed_pipeline()).unwrap();
    }

    pub fn read(&mut self) -> Result<Value, String> {
        self.parser
            .parse_value(&mut self.stream)
            .map_err(|e| format!("no reply from the server: {e}"))
    }

    /// One command, one reply.
    pub fn ask(&mut self, argv: &[Vec<u8>]) -> Value {
        self.send(argv);
        self.read().unwrap()
    }
}

/// The server under test and its connections.
pub struct Real {
    pub server: RedisServer,
    /// For `TIME` around each command: a connection of the test's own, never subscribed.
    clock: Wire,
    pub conns: Vec<Wire>,
}

impl Real {
    pub fn new(server: RedisServer, conns: usize) -> Real {
        let port = server.port();
        Real {
            clock: Wire::open(port),
            conns: (0..conns).map(|_| Wire::open(port)).collect(),
            server,
        }
    }

    /// The server's clock, in µs since the epoch.
    pub fn time_us(&mut self) -> i64 {
        time_of(&self.clock.ask(&[b"TIME".to_vec()])).expect("TIME's shape")
    }

    /// `argv` on `conn` between two `TIME`s written with it at once, so that the server runs
    /// the three back to back: the window the command ran in is microseconds wide even on a
    /// loaded machine. Its `frames` replies, between the two readings.
    pub fn bracketed(
        &mut self,
        conn: usize,
        argv: &[Vec<u8>],
        frames: usize,
    ) -> Result<(i64, Vec<Value>, i64), String> {
        let time = [b"TIME".to_vec()];
        let wire = &mut self.conns[conn];
        wire.send_all(&[&time, argv, &time]);
        let reading = |v: Value| time_of(&v).ok_or(format!("TIME answered {v:?}"));
        let before = reading(wire.read()?)?;
        let got = (0..frames).map(|_| wire.read()).collect::<Result<_, _>>()?;
        Ok((before, got, reading(wire.read()?)?))
    }

    /// `argv` on `conn` between two `TIME`s on the test's own connection: for a connection
    /// that may not send `TIME` (a subscribed RESP2 one).
    pub fn beside(
        &mut self,
        conn: usize,
        argv: &[Vec<u8>],
        frames: usize,
    ) -> Result<(i64, Vec<Value>, i64), String> {
        let before = self.time_us();
        self.conns[conn].send(argv);
        let got = (0..frames)
            .map(|_| self.conns[conn].read())
            .collect::<Result<_, _>>()?;
        Ok((before, got, self.time_us()))
    }

    /// Empties the server (data and script cache) and opens fresh connections.
    pub fn reset(&mut self) {
        self.clock.ask(&[b"FLUSHALL".to_vec()]);
        self.clock.ask(&[b"SCRIPT".to_vec(), b"FLUSH".to_vec()]);
        self.reconnect();
    }

    pub fn reconnect(&mut self) {
        let port = self.server.port();
        self.clock = Wire::open(port);
        for conn in &mut self.conns {
            *conn = Wire::open(port);
        }
    }

    /// `SAVE` (the snapshot the server restarts with, with its `dbfilename` kept).
    pub fn save(&mut self) {
        assert_eq!(self.clock.ask(&[b"SAVE".to_vec()]), Value::Okay);
    }

    /// Kills the server (SIGKILL) and starts it again on the same port and directory, and
    /// waits until it has loaded its data (it answers `LOADING` until then: the model's
    /// `set_loading`, which the simulator drives; here the sequences go on once it is done).
    pub fn restart(&mut self) {
        self.server.restart();
        self.reconnect();
        let loaded = crate::common::wait_until(LOAD_DEADLINE, || {
            (self.clock.ask(&[b"PING".to_vec()]) == Value::SimpleString("PONG".into()))
                .then_some(())
        });
        assert!(
            loaded.is_some(),
            "the server still loads after {LOAD_DEADLINE:?}"
        );
    }
}

/// `TIME`'s answer in µs, if it has `TIME`'s shape: two whole numbers, the second below 10⁶.
pub fn time_of(value: &Value) -> Option<i64> {
    let Value::Array(parts) = value else {
        return None;
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<i64>().ok(),
        _ => None,
    };
    match parts.as_slice() {
        [secs, micros] => {
            let (secs, micros) = (number(secs)?, number(micros)?);
            (0..1_000_000)
                .contains(&micros)
                .then_some(secs * 1_000_000 + micros)
        }
        _ => None,
    }
}
