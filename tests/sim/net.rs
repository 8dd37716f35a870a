//! The simulated network: a replica's dialer (slotcron's `redis::connector` seam) opens an
//! in-memory pipe to a node; a serving task per connection parses the requests redis-rs writes,
//! runs them on the model at the node's own clock and writes the replies back, through the
//! link's faults (cut, delay, reply lost after the command applied, reset, a hung node).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use slotcron::unstable::redis::connector::{Dial, Dialing, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, WriteHalf};
use tokio::sync::mpsc;

use crate::model::{self, ConnId};
use crate::world::Shared;

/// Bytes a pipe buffers each way.
const PIPE: usize = 256 * 1024;

/// One replica incarnation's dialer.
pub struct SimDial {
    pub world: Shared,
    pub replica: String,
    pub incarnation: u64,
}

/// Node index of an address `n<i>:6379`.
fn node_of(address: &str) -> usize {
    let host = address.split(':').next().unwrap_or_default();
    host.trim_start_matches('n')
        .parse()
        .expect("a simulated node's address")
}

impl Dial for SimDial {
    fn dial(&self, address: &str) -> Dialing {
        let node = node_of(address);
        let opened = self.open(node);
        Box::pin(async move { opened.map(|s| Box::new(s) as Box<dyn Stream>) })
    }
}

impl SimDial {
    fn open(&self, node: usize) -> io::Result<DuplexStream> {
        let mut w = self.world.lock();
        let refused = !w.alive(&self.replica, self.incarnation)
            || !w.nodes[node].up
            || w.link(&self.replica, node).cut;
        if refused {
            return Err(io::ErrorKind::ConnectionRefused.into());
        }
        let conn = ConnId(w.next_conn);
        w.next_conn += 1;
        let (client, server) = tokio::io::duplex(PIPE);
        let (tx, rx) = mpsc::unbounded_channel();
        w.nodes[node].conns.insert(conn, tx);
        let replica = self.replica.clone();
        w.event(|| format!("dial {replica} n{node} c{}", conn.0));
        let served = Served {
            world: self.world.clone(),
            node,
            conn,
            replica,
            incarnation: self.incarnation,
        };
        tokio::spawn(served.serve(server, rx));
        Ok(client)
    }
}

/// One connection's serving end.
struct Served {
    world: Shared,
    node: usize,
    conn: ConnId,
    replica: String,
    incarnation: u64,
}

/// What to do with one request's reply.
enum Fate {
    Reply(Vec<u8>, Duration),
    Lost,
    /// Applied, the reply swallowed by a one-way cut; the connection stays open and mute.
    Mute,
}

impl Served {
    async fn serve(self, stream: DuplexStream, mut pushes: mpsc::UnboundedReceiver<Vec<u8>>) {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        // Set once a one-way cut swallowed a reply: nothing is written on this stream again.
        let mut mute = false;
        loop {
            tokio::select! {
                biased;
                push = pushes.recv() => match push {
                    Some(_) if mute => {}
                    Some(bytes) => if wr.write_all(&bytes).await.is_err() { break },
                    None => break,
                },
                read = rd.read(&mut chunk) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        if !self.requests(&mut buf, &mut wr, &mut mute).await { break }
                    }
                },
            }
        }
        self.closed();
        drop((rd, wr));
    }

    /// Serves every whole request in `buf`; false when the connection is to close. `mute`: a
    /// one-way cut swallowed a reply on this stream, so none is written again.
    async fn requests(
        &self,
        buf: &mut Vec<u8>,
        wr: &mut WriteHalf<DuplexStream>,
        mute: &mut bool,
    ) -> bool {
        while let Some(argv) = model::parse_request(buf) {
            self.travel().await;
            self.until_served().await;
            match self.execute(&argv) {
                Some(Fate::Mute) => *mute = true,
                Some(Fate::Reply(..)) if *mute => {}
                Some(Fate::Reply(bytes, delay)) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if !self.open() || wr.write_all(&bytes).await.is_err() {
                        return false;
                    }
                }
                Some(Fate::Lost) | None => return false,
            }
        }
        true
    }

    /// A request's way to the node: its link's one-way latency.
    async fn travel(&self) {
        let lag = self.world.lock().link(&self.replica, self.node).lag_us;
        if lag > 0 {
            tokio::time::sleep(Duration::from_micros(lag)).await;
        }
    }

    /// Waits while the node hangs (a hung node reads nothing and answers nothing).
    async fn until_served(&self) {
        loop {
            let wake = {
                let w = self.world.lock();
                let node = &w.nodes[self.node];
                if !node.hung {
                    return;
                }
                node.wake.clone()
            };
            let notified = wake.notified();
            if !self.world.lock().nodes[self.node].hung {
                return;
            }
            notified.await;
        }
    }

    fn open(&self) -> bool {
        let w = self.world.lock();
        w.nodes[self.node].conns.contains_key(&self.conn)
    }

    /// Runs one request on the model; `None`: the connection was reset meanwhile.
    fn execute(&self, argv: &[Vec<u8>]) -> Option<Fate> {
        let mut w = self.world.lock();
        let dead = !w.alive(&self.replica, self.incarnation) || !w.nodes[self.node].up;
        if dead || !w.nodes[self.node].conns.contains_key(&self.conn) {
            return None;
        }
        let true_now = w.now_us();
        let now = w.nodes[self.node].clock_us(true_now);
        w.trace_request(self.conn.0, true_now, argv);
        let link = w.link(&self.replica, self.node);
        let delay = Duration::from_micros(link.delay_us + link.lag_us);
        let node = &mut w.nodes[self.node];
        let effects = node.model.execute(self.conn, now, argv);
        for (to, bytes) in effects.pushes {
            if let Some(tx) = node.conns.get(&to) {
                let _ = tx.send(bytes);
            }
        }
        if node.lose_replies > 0 {
            node.lose_replies -= 1;
            node.conns.remove(&self.conn);
            node.model.disconnect(self.conn);
            let (replica, n) = (self.replica.clone(), self.node);
            w.event(|| format!("reply lost {replica} n{n}"));
            return Some(Fate::Lost);
        }
        if link.mute {
            return Some(Fate::Mute);
        }
        Some(Fate::Reply(effects.reply, delay))
    }

    fn closed(&self) {
        let mut w = self.world.lock();
        if w.nodes[self.node].conns.remove(&self.conn).is_some() {
            w.nodes[self.node].model.disconnect(self.conn);
        }
    }
}

/// A dialer for `replica`'s incarnation `incarnation`.
pub fn dialer(world: &Shared, replica: &str, incarnation: u64) -> Arc<dyn Dial> {
    Arc::new(SimDial {
        world: world.clone(),
        replica: replica.to_owned(),
        incarnation,
    })
}
