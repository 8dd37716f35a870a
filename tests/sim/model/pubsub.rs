//! Pub/sub: `SUBSCRIBE`, `UNSUBSCRIBE`, `PUBLISH`, `PUBSUB NUMSUB`. Subscriptions belong to a
//! connection and end with it (a reset, a restart). Messages go out as pushes: a RESP2 array
//! on a RESP2 connection, a `>` push on a RESP3 one (`HELLO 3`).

use std::collections::{BTreeMap, BTreeSet};

use super::ConnId;
use super::resp::Reply;

/// Who listens on each channel, in the order they subscribed (redis-server delivers a
/// `PUBLISH` in that order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Channels {
    subscribers: BTreeMap<Vec<u8>, Vec<ConnId>>,
    /// Each connection's channels.
    of_conn: BTreeMap<ConnId, BTreeSet<Vec<u8>>>,
}

impl Channels {
    /// How many channels `conn` listens on (the count each confirmation carries).
    pub fn count(&self, conn: ConnId) -> usize {
        self.of_conn.get(&conn).map_or(0, BTreeSet::len)
    }

    /// `SUBSCRIBE channel [channel ...]`: one confirmation per channel.
    pub fn subscribe(&mut self, conn: ConnId, channels: &[Vec<u8>]) -> Reply {
        let mut confirmations = Vec::new();
        for channel in channels {
            if self
                .of_conn
                .entry(conn)
                .or_default()
                .insert(channel.clone())
            {
                self.subscribers
                    .entry(channel.clone())
                    .or_default()
                    .push(conn);
            }
            confirmations.push(confirmation("subscribe", Some(channel), self.count(conn)));
        }
        Reply::Many(confirmations)
    }

    /// `UNSUBSCRIBE [channel ...]`: every channel of `conn` when none is named (in the model's
    /// order, by name: redis-server's is its hash table's), one confirmation each.
    pub fn unsubscribe(&mut self, conn: ConnId, channels: &[Vec<u8>]) -> Reply {
        let named: Vec<Vec<u8>> = if channels.is_empty() {
            self.of_conn
                .get(&conn)
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        } else {
            channels.to_vec()
        };
        if named.is_empty() {
            return Reply::Many(vec![confirmation("unsubscribe", None, 0)]);
        }
        let mut confirmations = Vec::new();
        for channel in &named {
            self.leave(conn, channel);
            confirmations.push(confirmation("unsubscribe", Some(channel), self.count(conn)));
        }
        Reply::Many(confirmations)
    }

    fn leave(&mut self, conn: ConnId, channel: &[u8]) {
        if let Some(mine) = self.of_conn.get_mut(&conn) {
            mine.remove(channel);
            if mine.is_empty() {
                self.of_conn.remove(&conn);
            }
        }
        if let Some(listeners) = self.subscribers.get_mut(channel) {
            listeners.retain(|c| *c != conn);
            if listeners.is_empty() {
                self.subscribers.remove(channel);
            }
        }
    }

    /// Ends every subscription of `conn` (it closed).
    pub fn drop_conn(&mut self, conn: ConnId) {
        let mine: Vec<Vec<u8>> = self
            .of_conn
            .get(&conn)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for channel in mine {
            self.leave(conn, &channel);
        }
    }

    /// `PUBLISH channel message`: the receivers, in delivery order, and the message each gets.
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> (Vec<ConnId>, Reply) {
        let receivers = self.subscribers.get(channel).cloned().unwrap_or_default();
        let push = Reply::Push(vec![
            Reply::text("message"),
            Reply::bulk(channel),
            Reply::bulk(message),
        ]);
        (receivers, push)
    }

    /// `PUBSUB NUMSUB channel ...`: channel, count, ... (a flat array in RESP2 and RESP3).
    pub fn numsub(&self, channels: &[Vec<u8>]) -> Reply {
        let counts = channels.iter().flat_map(|channel| {
            let n = self.subscribers.get(channel).map_or(0, Vec::len);
            [Reply::bulk(channel), Reply::Int(n as i64)]
        });
        Reply::Array(counts.collect())
    }
}

fn confirmation(kind: &str, channel: Option<&[u8]>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::text(kind),
        channel.map_or(Reply::Nil, Reply::bulk),
        Reply::Int(count as i64),
    ])
}
