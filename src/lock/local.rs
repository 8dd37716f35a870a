//! Standalone mode: an in-process lock for one replica (local runs, trying slotcron out). It has
//! the same outcomes as the Redlock, so the rest of slotcron does not know the difference; it
//! gives no exclusion across processes, which is why standalone mode warns at start.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Acquire, Lease, SlotKey, Token};

#[derive(Debug)]
/// The lock of a standalone replica: slots raced in this process only.
pub struct LocalLock {
    replica: String,
    /// A std mutex: held for a map lookup only, never across an await.
    held: Mutex<HashMap<SlotKey, (Token, Instant)>>,
}

impl LocalLock {
    /// A lock for `replica`.
    pub fn new(replica: &str) -> Self {
        LocalLock {
            replica: replica.to_owned(),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `key` for `ttl` unless it is held.
    pub fn acquire(&self, key: &SlotKey, ttl: Duration) -> Acquire {
        let now = Instant::now();
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.retain(|_, (_, expires)| *expires > now);
        if let Some((holder, _)) = held.get(key) {
            return Acquire::Lost {
                holder: holder.clone(),
            };
        }
        let token = Token::new(&self.replica);
        held.insert(key.clone(), (token.clone(), now + ttl));
        Acquire::Won(Lease {
            key: key.clone(),
            token,
            validity: ttl,
            valid_until: now + ttl,
            contested: false,
        })
    }
}

impl LocalLock {
    /// Releases the lease if it is still this one; how many keys went.
    pub fn release(&self, lease: &Lease) -> usize {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match held.get(&lease.key) {
            Some((token, _)) if *token == lease.token => {
                usize::from(held.remove(&lease.key).is_some())
            }
            _ => 0,
        }
    }

    /// Extends the lease by `ttl` if it is still this one.
    pub fn extend(&self, lease: &Lease, ttl: Duration) -> bool {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match held.get_mut(&lease.key) {
            Some((token, expires)) if *token == lease.token => {
                *expires = Instant::now() + ttl;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::schedule::Slot;

    #[tokio::test]
    async fn second_acquire_loses_to_the_first() {
        let lock = LocalLock::new("me");
        let key = SlotKey::new("p", "j", Slot::at(chrono::Utc::now()));
        let Acquire::Won(lease) = lock.acquire(&key, Duration::from_secs(5)) else {
            panic!("first must win")
        };
        let Acquire::Lost { holder } = lock.acquire(&key, Duration::from_secs(5)) else {
            panic!("second must lose")
        };
        assert_eq!(holder, lease.token);
    }
}
