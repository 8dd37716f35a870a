//! The randomness seam: every random choice of the code (lock tokens, retry and backoff
//! jitter, probe channel names) is drawn from [`rng`]. In production that is the thread's
//! OS-seeded generator; a simulation seeds its thread ([`seed_this_thread`]) and runs the
//! whole fleet on that one thread (a current-thread runtime), so a seed replays a run exactly.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    /// The simulation's generator for this thread; `None`: the OS-seeded one.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// The source of every random choice: use it as any `rand::Rng`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Source;

/// The source of this thread's random choices.
pub fn rng() -> Source {
    Source
}

/// Draws this thread's random choices from `seed` from now on (the simulation's runs).
pub fn seed_this_thread(seed: u64) {
    SEEDED.with(|s| *s.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

/// Back to the OS-seeded generator for this thread (a simulation's run has ended).
pub fn unseed_this_thread() {
    SEEDED.with(|s| *s.borrow_mut() = None);
}

impl RngCore for Source {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }

    fn next_u64(&mut self) -> u64 {
        SEEDED.with(|s| match s.borrow_mut().as_mut() {
            Some(seeded) => seeded.next_u64(),
            None => rand::rng().next_u64(),
        })
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn a_seed_draws_the_same_choices_again() {
        seed_this_thread(7);
        let first: Vec<u64> = (0..4).map(|_| rng().random()).collect();
        seed_this_thread(7);
        let again: Vec<u64> = (0..4).map(|_| rng().random()).collect();
        unseed_this_thread();
        assert_eq!(first, again);
    }
}
