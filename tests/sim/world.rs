//! The simulated world: true time, the Redis nodes (the model, each with its own clock), the
//! links between replicas and nodes, the receivers' record, and the trace every run is hashed
//! and replayed by. One `World` per run, shared by every task of the run's one thread.

use std::collections::{BTreeMap, VecDeque};
use std::hash::Hasher;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use xxhash_rust::xxh3::Xxh3Default;

use crate::model::{self, ConnId};

/// The true time at a run's start: 2026-03-02 00:00:00 UTC, in µs (any fixed instant; a Monday).
pub const EPOCH_US: i64 = 1_772_409_600_000_000;
/// Events kept for a failure's report.
const LAST_EVENTS: usize = 40;

/// One node of the simulation: the model, its clock, whether it serves.
pub struct SimNode {
    pub model: model::Node,
    /// Its clock's offset from true time (µs) at `drift_since_us`: `TIME` answers it (with
    /// the drift since), expiry is judged on it. See [`SimNode::offset_us`].
    pub skew_us: i64,
    /// How fast its clock runs against true time, in millionths (9500: 0.95 % fast), since
    /// `drift_since_us` (true time, µs).
    pub drift_ppm: i64,
    pub drift_since_us: i64,
    pub up: bool,
    pub hung: bool,
    /// Open connections: the channel to each one's serving task (dropped: the connection resets).
    pub conns: BTreeMap<ConnId, mpsc::UnboundedSender<Vec<u8>>>,
    /// Replies to lose after the command applied (each also resets its connection).
    pub lose_replies: u32,
    /// Woken when the node stops hanging or comes back.
    pub wake: Arc<Notify>,
}

impl SimNode {
    /// Its clock's offset from true time at true time `now_us`: the skew and steps, and the
    /// drift run up since it began.
    pub fn offset_us(&self, now_us: i64) -> i64 {
        self.skew_us + (now_us - self.drift_since_us) * self.drift_ppm / 1_000_000
    }

    /// Its clock at true time `now_us` (µs since the epoch).
    pub fn clock_us(&self, now_us: i64) -> i64 {
        now_us + self.offset_us(now_us)
    }

    /// Makes its clock run `ppm` millionths fast from true time `now_us` (the drift so far
    /// kept as skew).
    pub fn drift(&mut self, now_us: i64, ppm: i64) {
        self.skew_us = self.offset_us(now_us);
        self.drift_since_us = now_us;
        self.drift_ppm = ppm;
    }
}

/// A link's faults, replica to node.
#[derive(Default, Clone)]
pub struct Link {
    pub cut: bool,
    /// Extra delay before each reply (µs).
    pub delay_us: u64,
    /// The link's one-way latency (µs), each way: a request applies this long after it was
    /// sent, its reply comes back as long after (the distance, not a fault). A connection
    /// serves its requests one at a time, so a pipeline of k requests takes k round trips: a
    /// far link made slower still, never faster.
    pub lag_us: u64,
    /// One way cut: requests reach the node and apply, replies never come back (a connection
    /// that lost one stays mute, as a TCP stream stalls at the first lost segment).
    pub mute: bool,
}

/// What a receiver saw: one effect of one run.
#[derive(Debug, Clone)]
pub struct Effect {
    pub job: String,
    pub slot_us: i64,
    pub fence: i64,
    /// The request's `Idempotency-Key`.
    pub key: String,
    pub replica: String,
    pub at_us: i64,
}

/// The run's shared state.
pub struct World {
    pub start: Instant,
    pub nodes: Vec<SimNode>,
    pub links: BTreeMap<(String, usize), Link>,
    /// Each replica's live incarnation; a dialer or receiver of an older one is a dead process.
    pub incarnation: BTreeMap<String, u64>,
    /// Replicas a rolling update restarted with the new version: when the old process was
    /// told to stop and when the new one started (true time, µs).
    pub rolled: BTreeMap<String, (i64, i64)>,
    /// Each replica's wall-clock offset (µs), read by its clock without the world's lock.
    pub replica_skew: BTreeMap<String, Arc<AtomicI64>>,
    pub effects: Vec<Effect>,
    /// Receivers refuse every request while true.
    pub receivers_refuse: bool,
    /// How the receivers answer (a fault's 5xx, 429 or black hole).
    pub answering: crate::receivers::Answering,
    /// Replicas whose egress is broken: their requests are refused.
    pub egress_broken: std::collections::BTreeSet<String>,
    /// Sends still to be ambiguous (acted on, the answer cut off).
    pub ambiguous: u32,
    /// The operator's pauses: job, true time taken (µs), true time resumed.
    pub pauses: Vec<(String, i64, Option<i64>)>,
    pub next_conn: u64,
    pub faults: u64,
    /// Last fault's true time (µs): liveness is judged on slots away from faults.
    pub fault_times: Vec<(i64, i64)>,
    /// Nodes restarted empty, and when (true time, µs): records older than a majority of
    /// these are beyond what the history keeps.
    pub emptied: Vec<(usize, i64)>,
    /// The trace's hash: every request's bytes go through it (XXH3: SipHash was a fortieth of
    /// a calm run's CPU).
    hasher: Xxh3Default,
    pub last: VecDeque<String>,
    pub events: u64,
    /// Every event as text, when `SLOTCRON_SIM_DUMP` names a file to write them to (to find
    /// where two runs of one seed part).
    pub dump: Option<Vec<String>>,
}

/// The world, shared.
#[derive(Clone)]
pub struct Shared(pub Arc<Mutex<World>>);

impl Shared {
    pub fn new(nodes: usize) -> Self {
        let nodes = (0..nodes)
            .map(|_| SimNode {
                model: model::Node::new(model::Persistence::Aof),
                skew_us: 0,
                drift_ppm: 0,
                drift_since_us: EPOCH_US,
                up: true,
                hung: false,
                conns: BTreeMap::new(),
                lose_replies: 0,
                wake: Arc::new(Notify::new()),
            })
            .collect();
        Shared(Arc::new(Mutex::new(World {
            start: Instant::now(),
            nodes,
            links: BTreeMap::new(),
            incarnation: BTreeMap::new(),
            rolled: BTreeMap::new(),
            replica_skew: BTreeMap::new(),
            effects: Vec::new(),
            receivers_refuse: false,
            answering: Default::default(),
            egress_broken: Default::default(),
            ambiguous: 0,
            pauses: Vec::new(),
            next_conn: 1,
            faults: 0,
            fault_times: Vec::new(),
            emptied: Vec::new(),
            hasher: Xxh3Default::new(),
            last: VecDeque::new(),
            events: 0,
            dump: std::env::var_os("SLOTCRON_SIM_DUMP").map(|_| Vec::new()),
        })))
    }

    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl World {
    /// True time now (µs since the epoch).
    pub fn now_us(&self) -> i64 {
        EPOCH_US + self.start.elapsed().as_micros() as i64
    }

    /// Adds an event to the trace (hashed; the last ones kept for a failure's report).
    pub fn event(&mut self, what: impl FnOnce() -> String) {
        let text = format!("{} {}", self.now_us() - EPOCH_US, what());
        self.hasher.write(text.as_bytes());
        self.events += 1;
        if let Some(dump) = &mut self.dump {
            dump.push(text.clone());
        }
        if self.last.len() == LAST_EVENTS {
            self.last.pop_front();
        }
        self.last.push_back(text);
    }

    /// Adds a request on the wire (each argument, on connection `tag`, at true time `now_us`)
    /// to the trace without keeping it for the report. The caller's one reading of the clock
    /// serves every argument: reading tokio's paused clock per argument was a tenth of a calm
    /// run's CPU.
    pub fn trace_request(&mut self, tag: u64, now_us: i64, argv: &[Vec<u8>]) {
        for arg in argv {
            self.hasher.write_i64(now_us);
            self.hasher.write_u64(tag);
            self.hasher.write(arg);
            self.events += 1;
            if let Some(dump) = &mut self.dump {
                let at = now_us - EPOCH_US;
                dump.push(format!("{at} c{tag} {}", String::from_utf8_lossy(arg)));
            }
        }
    }

    /// Writes the dump (see `dump`) to `SLOTCRON_SIM_DUMP`.
    pub fn write_dump(&self) {
        if let (Some(dump), Some(path)) = (&self.dump, std::env::var_os("SLOTCRON_SIM_DUMP")) {
            let _ = std::fs::write(path, dump.join("\n"));
        }
    }

    pub fn trace_hash(&self) -> u64 {
        self.hasher.finish()
    }

    pub fn link(&self, replica: &str, node: usize) -> Link {
        (self.links.get(&(replica.to_owned(), node)))
            .cloned()
            .unwrap_or_default()
    }

    pub fn alive(&self, replica: &str, incarnation: u64) -> bool {
        self.incarnation.get(replica) == Some(&incarnation)
    }

    /// The fleet's true offset: the lower median of the nodes' clock offsets (µs).
    pub fn fleet_offset_us(&self) -> i64 {
        let now = self.now_us();
        let mut skews: Vec<i64> = self.nodes.iter().map(|n| n.offset_us(now)).collect();
        skews.sort_unstable();
        skews[(skews.len() - 1) / 2]
    }

    /// Resets every connection of node `node` (its serving tasks see their channel close).
    pub fn reset_node(&mut self, node: usize) {
        let conns = std::mem::take(&mut self.nodes[node].conns);
        for conn in conns.into_keys() {
            self.nodes[node].model.disconnect(conn);
        }
    }

    /// Marks a fault at true time `from_us` lasting to `to_us` (liveness looks away from it).
    pub fn fault(&mut self, from_us: i64, to_us: i64) {
        self.faults += 1;
        self.fault_times.push((from_us, to_us));
    }
}

/// A replica's wall clock: true time plus its own offset (skew and steps).
#[derive(Debug, Clone)]
pub struct SimClock {
    pub start: Instant,
    pub skew_us: Arc<AtomicI64>,
}

impl slotcron::unstable::time::schedule::Clock for SimClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        let us = EPOCH_US
            + self.start.elapsed().as_micros() as i64
            + self.skew_us.load(Ordering::Relaxed);
        chrono::DateTime::from_timestamp_micros(us).expect("a simulated instant")
    }
}
