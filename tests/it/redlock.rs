//! slotcron's Redlock against real redis-server processes: majority rules for every subset of
//! failed nodes, validity, release, a loser's single round trip, split votes, hung nodes.

use crate::common;

use std::time::Duration;

use common::{RedisCluster, redis_cmd, redis_get, redis_pttl, redis_query, wait_until_async};
use slotcron::unstable::lock::{
    Acquire, Lease, LockConfig, Redlock, SlotKey, Token, UnavailableReason,
};
use slotcron::unstable::redis::{NodeUrl, quorum};
use slotcron::unstable::time::schedule::Slot;

const TTL: Duration = Duration::from_secs(10);

fn lock(urls: &[String], replica: &str, retry_count: u32) -> Redlock {
    lock_timing_out(urls, replica, retry_count, Duration::from_millis(100))
}

/// [`lock`] with each node's answer awaited at most `node_timeout`.
fn lock_timing_out(
    urls: &[String],
    replica: &str,
    retry_count: u32,
    node_timeout: Duration,
) -> Redlock {
    let nodes: Vec<NodeUrl> = urls.iter().map(|u| NodeUrl::parse(u).unwrap()).collect();
    let config = LockConfig {
        node_timeout,
        retry_count,
        retry_delay: Duration::from_millis(40),
    };
    Redlock::new(&nodes, replica, config, None).unwrap()
}

fn key(job: &str) -> SlotKey {
    SlotKey::new("lock-test", job, Slot::at(chrono::Utc::now()))
}

/// Every subset of `n` nodes killed: won exactly when a majority is alive.
async fn majority_rule(n: usize) {
    let cluster = RedisCluster::start(n);
    for dead_mask in 0u32..(1 << n) {
        let dead: Vec<usize> = (0..n).filter(|i| dead_mask & (1 << i) != 0).collect();
        for &i in &dead {
            cluster[i].kill();
        }
        let alive = n - dead.len();
        let result = lock(&cluster.urls(), "r", 1)
            .acquire(&key(&format!("subset-{n}-{dead_mask}")), TTL)
            .await;
        match result {
            Acquire::Won(_) => assert!(
                alive >= quorum(n),
                "won with {alive}/{n} alive ({dead:?} dead)"
            ),
            Acquire::Unavailable(u) => {
                assert!(alive < quorum(n), "not won with {alive}/{n} alive: {u}");
                assert_eq!(
                    u.reason,
                    UnavailableReason::NoQuorum {
                        answered: alive,
                        needed: quorum(n)
                    }
                );
                assert_eq!(u.errors.len(), dead.len(), "{u}");
                for &i in &dead {
                    let port = cluster[i].port().to_string();
                    assert!(
                        u.errors.iter().any(|e| e.node.ends_with(&port)),
                        "no error names node {i}: {u}"
                    );
                }
            }
            Acquire::Lost { holder } => panic!("nobody else races here, yet lost to {holder:?}"),
        }
        for &i in &dead {
            cluster[i].restart();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn won_exactly_when_a_majority_answers_3_nodes() {
    majority_rule(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn won_exactly_when_a_majority_answers_5_nodes() {
    majority_rule(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn winner_holds_the_key_with_its_token_ttl_and_validity() {
    let cluster = RedisCluster::start(3);
    let k = key("holds");
    let redlock = lock(&cluster.urls(), "a", 0);
    let around = std::time::Instant::now();
    let Acquire::Won(lease) = redlock.acquire(&k, TTL).await else {
        panic!("must win")
    };
    let outer = around.elapsed();
    // validity = ttl - elapsed - drift (1% of ttl + 2 ms): the lock's own elapsed lies inside
    // the one measured around it, so the validity is bounded on both sides by what this test
    // saw, however slow the machine (no speed assumed; the acquire's speed is in BENCHMARKS.md).
    let drift = Duration::from_millis(102);
    assert!(lease.validity <= TTL - drift, "{:?}", lease.validity);
    assert!(
        lease.validity >= TTL.saturating_sub(outer + drift),
        "{:?} after {outer:?}",
        lease.validity
    );
    // On a majority at least: the race stops once a majority has answered.
    let holding = holders(&cluster, &k, &lease.token);
    assert!(holding.len() >= quorum(3));
    for node in holding {
        let pttl = redis_pttl(&node.url(), k.as_str());
        assert!(pttl > 0 && pttl <= TTL.as_millis() as i64, "{pttl}");
    }
    assert_eq!(lease.token.replica(), "a");
}

/// The running lease across a failover, without Sentinel's timing: the node is made a replica
/// (of a port nobody listens on, so it keeps its keys and refuses writes with `READONLY`) before
/// the release, and a primary again while the release is retried. A release that failed must
/// be asked again, or the lease stays until its TTL and the job's next slots are skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_as_readonly_is_retried_until_the_node_is_a_primary_again() {
    let cluster = RedisCluster::start(1);
    let url = cluster[0].url();
    let a = lock(&cluster.urls(), "a", 0);
    let k = key("release-readonly");
    let Acquire::Won(lease) = a.acquire(&k, TTL).await else {
        panic!("a must win")
    };
    let nowhere = common::free_port().to_string();
    redis_cmd(&url, &["REPLICAOF", "127.0.0.1", &nowhere]).unwrap();
    let promote = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            // After the first release was refused: it is asked at once.
            std::thread::sleep(Duration::from_millis(300));
            redis_cmd(&url, &["REPLICAOF", "NO", "ONE"]).unwrap();
        })
    };
    let released = a.release_retrying(&lease, TTL).await;
    promote.await.unwrap();
    assert_eq!(
        released, 1,
        "the release must reach the node once it is a primary again"
    );
    assert_eq!(redis_get(&url, k.as_str()), None, "the lease must be gone");
}

/// A release with no time for a second try: one request to each node.
const ONE_TRY: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_removes_only_the_own_token() {
    let cluster = RedisCluster::start(3);
    let a = lock(&cluster.urls(), "a", 0);
    let b = lock(&cluster.urls(), "b", 0);
    let k = key("release");
    let Acquire::Won(lease) = a.acquire(&k, TTL).await else {
        panic!("a must win")
    };
    // The race stops at the first majority, so the third node may never have been asked.
    assert!(a.release_retrying(&lease, ONE_TRY).await >= quorum(3));
    assert!(
        cluster
            .iter()
            .all(|n| redis_get(&n.url(), k.as_str()).is_none())
    );

    let Acquire::Won(b_lease) = b.acquire(&k, TTL).await else {
        panic!("b must win the released key")
    };
    let impostor = Lease {
        token: Token::new("a"),
        ..b_lease.clone()
    };
    let before = holders(&cluster, &k, &b_lease.token).len();
    assert!(before >= quorum(3));
    assert_eq!(
        a.release_retrying(&impostor, ONE_TRY).await,
        0,
        "a must not remove b's key"
    );
    let after = holders(&cluster, &k, &b_lease.token).len();
    assert_eq!(
        after, before,
        "b's key must stay on every node that held it"
    );
}

/// The nodes whose value for `k` is `token`.
fn holders<'c>(
    cluster: &'c RedisCluster,
    k: &SlotKey,
    token: &Token,
) -> Vec<&'c common::RedisServer> {
    cluster
        .iter()
        .filter(|n| redis_get(&n.url(), k.as_str()).as_deref() == Some(token.as_str()))
        .collect()
}

fn stat_calls(url: &str, command: &str) -> u64 {
    let info: String = redis_query(url, &["INFO", "commandstats"]).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loser_facing_a_majority_holder_takes_one_round_trip() {
    let cluster = RedisCluster::start(3);
    let a = lock(&cluster.urls(), "a", 5);
    let b = lock(&cluster.urls(), "b", 5);
    let k = key("one-round-trip");
    assert!(matches!(a.acquire(&k, TTL).await, Acquire::Won(_)));
    // Warm b's connections so only the race itself is counted.
    for node in b.nodes().iter() {
        node.ping().await.unwrap();
    }
    for node in cluster.iter() {
        redis_cmd(&node.url(), &["CONFIG", "RESETSTAT"]).unwrap();
    }
    let Acquire::Lost { holder } = b.acquire(&k, TTL).await else {
        panic!("b must lose")
    };
    assert_eq!(holder.replica(), "a");
    for node in cluster.iter() {
        assert!(
            stat_calls(&node.url(), "set") <= 1,
            "more than one SET on a node"
        );
        assert_eq!(
            stat_calls(&node.url(), "eval") + stat_calls(&node.url(), "evalsha"),
            0,
            "a loser releases nothing"
        );
    }
    let sets: u64 = cluster.iter().map(|n| stat_calls(&n.url(), "set")).sum();
    assert!(sets >= 2, "the loser asked fewer than a majority");
}

/// Races `replicas` Redlocks for `k` at once; returns the results.
async fn race(urls: &[String], k: &SlotKey, replicas: usize) -> Vec<Acquire> {
    let locks: Vec<Redlock> = (0..replicas)
        .map(|i| lock(urls, &format!("r{i}"), 10))
        .collect();
    futures_util::future::join_all(locks.iter().map(|l| l.acquire(k, TTL))).await
}

fn exactly_one_winner(results: &[Acquire]) {
    let winners: Vec<&Lease> = results
        .iter()
        .filter_map(|r| {
            if let Acquire::Won(l) = r {
                Some(l)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0].token.replica();
    for r in results {
        match r {
            Acquire::Won(_) => {}
            Acquire::Lost { holder } => assert_eq!(holder.replica(), winner),
            Acquire::Unavailable(u) => panic!("a split vote must end with a winner, not {u}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_split_vote_ends_with_exactly_one_winner() {
    // One node down and two ghost holders, one on each live node: the first attempt of every
    // racer is a split; the ghosts expire and the retries settle on one winner.
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls();
    cluster[2].kill();
    let k = key("split-one-down");
    redis_cmd(
        &cluster[0].url(),
        &["SET", k.as_str(), "ghost-a:1", "PX", "150"],
    )
    .unwrap();
    redis_cmd(
        &cluster[1].url(),
        &["SET", k.as_str(), "ghost-b:1", "PX", "150"],
    )
    .unwrap();
    exactly_one_winner(&race(&urls, &k, 5).await);

    // All nodes up, ghosts on two of them.
    cluster[2].restart();
    let k = key("split-all-up");
    redis_cmd(
        &cluster[0].url(),
        &["SET", k.as_str(), "ghost-a:1", "PX", "150"],
    )
    .unwrap();
    redis_cmd(
        &cluster[1].url(),
        &["SET", k.as_str(), "ghost-b:1", "PX", "150"],
    )
    .unwrap();
    exactly_one_winner(&race(&cluster.urls(), &k, 5).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_racers_on_healthy_nodes_have_one_winner() {
    let cluster = RedisCluster::start(3);
    for round in 0..20 {
        exactly_one_winner(&race(&cluster.urls(), &key(&format!("healthy-{round}")), 5).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_delays_a_race_by_no_more_than_its_timeout() {
    // Long beside a local race (milliseconds, tens on a loaded machine): the bound below, the
    // issue's promise, then holds with a margin a loaded machine cannot eat.
    const NODE_TIMEOUT: Duration = Duration::from_secs(1);
    let cluster = RedisCluster::start(3);
    let l = lock_timing_out(&cluster.urls(), "r", 0, NODE_TIMEOUT);
    for node in l.nodes().iter() {
        node.ping().await.unwrap();
    }
    cluster[0].pause();
    let started = std::time::Instant::now();
    let result = l.acquire(&key("paused"), TTL).await;
    let elapsed = started.elapsed();
    cluster[0].resume();
    assert!(matches!(result, Acquire::Won(_)), "{result:?}");
    // The one bounded time the issue asks for: the node timeout, plus as much again.
    assert!(elapsed < NODE_TIMEOUT * 2, "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_is_used_again_after_reconnecting() {
    let cluster = RedisCluster::start(3);
    let l = lock(&cluster.urls(), "r", 0);
    cluster[0].kill();
    assert!(matches!(
        l.acquire(&key("before-restart"), TTL).await,
        Acquire::Won(_)
    ));
    cluster[0].restart();
    let mut on_all = false;
    for attempt in 0..50 {
        let k = key(&format!("after-restart-{attempt}"));
        if let Acquire::Won(lease) = l.acquire(&k, TTL).await
            && redis_get(&cluster[0].url(), k.as_str()).as_deref() == Some(lease.token.as_str())
        {
            on_all = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(on_all, "the restarted node never took a key again");
}

/// A node holding the key as another type answers with an error reply: the lock counts it as
/// a failed node (not as ours, not as another holder). With the two other nodes up it is won on
/// them; with one of them down too, only one node answered and the lock says so, naming the
/// wrong-type node among the failed ones as a node that answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_on_one_node_counts_as_a_failed_node() {
    let cluster = RedisCluster::start(3);
    let wrong_type = |job: &str| {
        let k = key(job);
        redis_cmd(&cluster[0].url(), &["RPUSH", k.as_str(), "x"]).unwrap();
        k
    };
    let won = lock(&cluster.urls(), "r", 0)
        .acquire(&wrong_type("wrong-type"), TTL)
        .await;
    assert!(matches!(won, Acquire::Won(_)), "{won:?}");
    cluster[2].kill();
    let result = lock(&cluster.urls(), "r", 0)
        .acquire(&wrong_type("wrong-type-one-down"), TTL)
        .await;
    let Acquire::Unavailable(u) = result else {
        panic!("one good node of three must not decide: {result:?}")
    };
    let needed = quorum(3);
    assert_eq!(
        u.reason,
        UnavailableReason::NoQuorum {
            answered: 1,
            needed
        }
    );
    let port = cluster[0].port().to_string();
    let failed = u.errors.iter().find(|e| e.node.ends_with(&port));
    assert!(
        failed.is_some_and(|e| e.node_answered()),
        "the wrong-type node is not counted as a failed node that answered: {u}"
    );
    assert_eq!(u.errors.len(), 2, "{u}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_and_five_nodes_work() {
    for n in [1, 5] {
        let cluster = RedisCluster::start(n);
        let k = key(&format!("n{n}"));
        assert!(matches!(
            lock(&cluster.urls(), "a", 0).acquire(&k, TTL).await,
            Acquire::Won(_)
        ));
        let Acquire::Lost { holder } = lock(&cluster.urls(), "b", 0).acquire(&k, TTL).await else {
            panic!("b must lose")
        };
        assert_eq!(holder.replica(), "a");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_decides_each_key_on_its_own_and_answers_in_order() {
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls();
    let held = key("batch-held");
    let Acquire::Won(_) = lock(&urls, "a", 0).acquire(&held, TTL).await else {
        panic!("a must take the held key")
    };
    let (free, wrong_one, wrong_two) = (
        key("batch-free"),
        key("batch-wrong-one"),
        key("batch-wrong-two"),
    );
    redis_cmd(&cluster[0].url(), &["RPUSH", wrong_one.as_str(), "x"]).unwrap();
    for node in cluster.iter().take(2) {
        redis_cmd(&node.url(), &["RPUSH", wrong_two.as_str(), "x"]).unwrap();
    }
    let b = lock(&urls, "b", 0);
    let claims: Vec<(SlotKey, Duration)> = [&free, &held, &wrong_one, &wrong_two]
        .into_iter()
        .map(|k| (k.clone(), TTL))
        .collect();
    let results = b.acquire_many(&claims).await;
    assert_eq!(results.len(), 4);
    let Acquire::Won(lease) = &results[0] else {
        panic!("the free key must be won: {:?}", results[0])
    };
    assert_eq!(lease.key, free);
    assert_eq!(holders(&cluster, &free, &lease.token).len(), 3);
    let Acquire::Lost { holder } = &results[1] else {
        panic!("the held key must be lost: {:?}", results[1])
    };
    assert_eq!(holder.replica(), "a");
    // A wrong type fails that key on that node only: two of three still make a majority.
    assert!(
        matches!(&results[2], Acquire::Won(l) if l.key == wrong_one),
        "{:?}",
        results[2]
    );
    let Acquire::Unavailable(why) = &results[3] else {
        panic!(
            "a key failing on a majority is unavailable: {:?}",
            results[3]
        )
    };
    assert_eq!(
        why.reason,
        UnavailableReason::NoQuorum {
            answered: 1,
            needed: 2
        }
    );
    // The lost and unavailable keys left no token of b's behind (the lists stay lists).
    for node in cluster.iter() {
        let value = redis_get(&node.url(), held.as_str()).unwrap_or_default();
        assert!(
            value.starts_with("a:"),
            "the held key changed hands: {value}"
        );
    }
    assert_eq!(redis_get(&cluster[2].url(), wrong_two.as_str()), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_batches_give_every_key_exactly_one_winner() {
    // Five replicas race the same 200 keys in one batch each: their pipelines interleave on
    // the nodes, so some keys split; every key still ends with one winner the losers name.
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls();
    let claims: Vec<(SlotKey, Duration)> = (0..200)
        .map(|i| (key(&format!("batch-race-{i}")), TTL))
        .collect();
    let locks: Vec<Redlock> = (0..5).map(|i| lock(&urls, &format!("r{i}"), 10)).collect();
    let results: Vec<Vec<Acquire>> =
        futures_util::future::join_all(locks.iter().map(|l| l.acquire_many(&claims))).await;
    for (i, (k, _)) in claims.iter().enumerate() {
        let per_key: Vec<Acquire> = results.iter().map(|r| r[i].clone()).collect();
        exactly_one_winner(&per_key);
        let Some(Acquire::Won(lease)) = per_key.iter().find(|r| matches!(r, Acquire::Won(_)))
        else {
            unreachable!("exactly_one_winner checked it")
        };
        assert!(holders(&cluster, k, &lease.token).len() >= quorum(3));
    }
}

/// Whether node `i` is healthy in `lock`'s view.
fn up(lock: &Redlock, i: usize) -> bool {
    lock.nodes().view()[i].up
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_node_met_by_a_loser_is_not_waited_for_next_and_is_healthy_again_on_resume() {
    // A node timeout long enough that a race which waited for the hung node is told from one
    // that did not however loaded the machine (a race on two healthy local nodes takes
    // milliseconds); the bound below is the product's promise: a suspect node is not awaited.
    const NODE_TIMEOUT: Duration = Duration::from_secs(2);
    let cluster = RedisCluster::start(3);
    let holder = lock(&cluster.urls(), "holder", 0);
    let l = lock_timing_out(&cluster.urls(), "r", 0, NODE_TIMEOUT);
    for node in l.nodes().iter() {
        node.ping().await.unwrap();
    }
    let taken = key("taken-before-the-hang");
    assert!(matches!(holder.acquire(&taken, TTL).await, Acquire::Won(_)));
    cluster[0].pause();
    // The loser stops at the majority holding the other token; its SET to the hung node is
    // still awaited in the background, to its timeout, and marks the node suspect.
    assert!(matches!(l.acquire(&taken, TTL).await, Acquire::Lost { .. }));
    let suspect = wait_until_async(NODE_TIMEOUT * 3, || (!up(&l, 0)).then_some(())).await;
    assert!(
        suspect.is_some(),
        "the loser's timed-out SET did not reach the view"
    );
    // The next race does not wait for the suspect node: less than its node timeout.
    let started = std::time::Instant::now();
    let next = l.acquire(&key("won-while-hung"), TTL).await;
    let elapsed = started.elapsed();
    assert!(matches!(next, Acquire::Won(_)), "{next:?}");
    assert!(
        elapsed < NODE_TIMEOUT,
        "waited {elapsed:?} for a suspect node"
    );
    cluster[0].resume();
    // The next call still sends to it; its answer makes it healthy again.
    let after = key("won-after-the-resume");
    assert!(matches!(l.acquire(&after, TTL).await, Acquire::Won(_)));
    let healthy = wait_until_async(Duration::from_secs(2), || up(&l, 0).then_some(())).await;
    assert!(
        healthy.is_some(),
        "the resumed node's answer did not make it healthy"
    );
    assert!(redis_get(&cluster[0].url(), after.as_str()).is_some());
}

/// A moment in which every node was slow (the 09:00 burst on a loaded machine: each replica's
/// pipelines timed out on all three at once) leaves every node suspect in the view. A race
/// then still waits for them, each within its node timeout: without a suspect's answer no
/// majority is possible. (It waited for none and ended `Unavailable` at once, "0 node(s)
/// answered, 2 needed": in the benchmark a winner's running lease, raced right after its win,
/// failed so, and its won slots were skipped and missed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_race_waits_for_suspect_nodes_when_the_healthy_ones_are_no_majority() {
    let cluster = RedisCluster::start(3);
    let l = lock(&cluster.urls(), "r", 0);
    for node in l.nodes().iter() {
        node.ping().await.unwrap();
    }
    for node in cluster.iter() {
        node.pause();
    }
    let hung = l.acquire(&key("raced-while-every-node-hung"), TTL).await;
    assert!(matches!(hung, Acquire::Unavailable(_)), "{hung:?}");
    // The requests still out (the race's releases) end at their timeouts, nothing left to
    // answer before the nodes resume: every node stays suspect until the next race asks it.
    l.nodes().settle().await;
    for node in cluster.iter() {
        node.resume();
    }
    assert!((0..3).all(|i| !up(&l, i)), "{:?}", l.nodes().view());
    let next = l.acquire(&key("raced-after-the-resume"), TTL).await;
    assert!(matches!(next, Acquire::Won(_)), "{next:?}");
    // Answers, the one not waited for included (in the background), make the nodes healthy.
    let healthy = || (0..3).all(|i| up(&l, i)).then_some(());
    let healthy = wait_until_async(Duration::from_secs(2), healthy).await;
    assert!(healthy.is_some(), "{:?}", l.nodes().view());
}
