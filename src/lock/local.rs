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

    const TTL: Duration = Duration::from_secs(5);

    fn won(lock: &LocalLock, key: &SlotKey) -> Lease {
        let Acquire::Won(lease) = lock.acquire(key, TTL) else {
            panic!("{key} must be free")
        };
        lease
    }

    /// A lock holding a key under `lease`, and the same lease under another replica's token.
    fn held_with_an_impostor() -> (LocalLock, SlotKey, Lease, Lease) {
        let lock = LocalLock::new("me");
        let key = SlotKey::running("p", "j");
        let lease = won(&lock, &key);
        let impostor = Lease {
            token: Token::new("other"),
            ..lease.clone()
        };
        (lock, key, lease, impostor)
    }

    /// A key is held for its TTL and free from its end on: the instant itself is past it.
    #[tokio::test(start_paused = true)]
    async fn a_key_is_held_until_its_ttl_ends_and_free_after() {
        let lock = LocalLock::new("me");
        let key = SlotKey::running("p", "j");
        let lease = won(&lock, &key);
        assert_eq!(lease.valid_until, Instant::now() + TTL);
        tokio::time::advance(TTL - Duration::from_millis(1)).await;
        assert!(matches!(lock.acquire(&key, TTL), Acquire::Lost { .. }));
        tokio::time::advance(Duration::from_millis(1)).await;
        won(&lock, &key);
    }

    /// A release removes the key only under its own token, and says how many keys went.
    #[tokio::test(start_paused = true)]
    async fn a_release_removes_only_its_own_token() {
        let (lock, key, lease, impostor) = held_with_an_impostor();
        assert_eq!(
            lock.release(&impostor),
            0,
            "another token must not release it"
        );
        assert!(matches!(lock.acquire(&key, TTL), Acquire::Lost { .. }));
        assert_eq!(lock.release(&lease), 1);
        assert_eq!(lock.release(&lease), 0, "released once");
        won(&lock, &key);
    }

    /// An extension under the own token moves the key's end to `ttl` from now; another token's
    /// does nothing.
    #[tokio::test(start_paused = true)]
    async fn an_extension_moves_the_end_under_its_own_token_only() {
        let (lock, key, lease, impostor) = held_with_an_impostor();
        tokio::time::advance(TTL / 2).await;
        assert!(
            !lock.extend(&impostor, TTL),
            "another token must not extend it"
        );
        assert!(lock.extend(&lease, TTL));
        tokio::time::advance(TTL - Duration::from_millis(1)).await;
        assert!(
            matches!(lock.acquire(&key, TTL), Acquire::Lost { .. }),
            "extended"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        won(&lock, &key);
        assert!(!lock.extend(&lease, TTL), "a lapsed lease is not extended");
    }
}
