//! FAULTS.md's scenarios that the simulation can express, each a named case (FAULTS.md names
//! it beside the real-process test): 3 replicas, 3 nodes, 3 jobs every second, 2 minutes, the
//! faults at the times given. Inside the Redlock assumptions unless said.

use crate::cases;
use crate::fleet::JobSpec;
use crate::nemesis::{Fault, Timed};
use crate::run::Plan;

fn at(at_s: f64, fault: Fault) -> Timed {
    Timed { at_s, fault }
}

fn case(name: &str, inside: bool, faults: Vec<Timed>) {
    cases::check(name, &plan(name, inside, faults));
}

/// The plan of a named case: 3 replicas, 3 nodes, 3 jobs every second, 2 minutes.
fn plan(name: &str, inside: bool, faults: Vec<Timed>) -> Plan {
    Plan {
        name: name.to_owned(),
        seed: 30,
        profile: "named".to_owned(),
        inside,
        replicas: 3,
        nodes: 3,
        jobs: 3,
        max_skew_ms: 2000,
        horizon_s: 120,
        job_specs: Vec::new(),
        candidates: None,
        on_time_ms: None,
        one_run_at_a_time: false,
        rolled_out: Vec::new(),
        faults,
    }
}

fn job(name: &str, schedule: &str, timeout_s: u64) -> JobSpec {
    JobSpec {
        name: name.to_owned(),
        schedule: schedule.to_owned(),
        timeout_s,
    }
}

#[test]
fn cold_start_with_refused_connections_and_skewed_clocks() {
    let mut faults: Vec<Timed> = (0..3)
        .map(|node| {
            at(
                0.0,
                Fault::NodeKill {
                    node,
                    down_s: 4.0,
                    empty: false,
                },
            )
        })
        .collect();
    faults.push(at(
        0.0,
        Fault::ReplicaClock {
            replica: 0,
            step_ms: 3_000,
        },
    ));
    faults.push(at(
        0.0,
        Fault::ReplicaClock {
            replica: 1,
            step_ms: -35_000,
        },
    ));
    case("cold_start", true, faults);
}

#[test]
fn a_replica_frozen_35s_answers_held() {
    // A VM freeze as its links see it: every answer to r0 held 35 s, then delivered late.
    let faults = (0..3)
        .map(|node| {
            at(
                30.0,
                Fault::Delay {
                    replica: Some(0),
                    node,
                    ms: 35_000,
                    for_s: 35.0,
                },
            )
        })
        .collect();
    case("vm_freeze_35s", true, faults);
}

#[test]
fn a_rolling_restart_of_every_replica() {
    let faults = (0..3)
        .map(|replica| {
            at(
                30.0 + 15.0 * replica as f64,
                Fault::ReplicaCrash {
                    replica,
                    down_s: 3.0,
                },
            )
        })
        .collect();
    case("rolling_restart", true, faults);
}

#[test]
fn a_rolling_empty_restart_of_every_node_under_a_pause() {
    let mut faults = vec![at(
        25.0,
        Fault::Pause {
            job: 0,
            for_s: 60.0,
            clock_off_s: 300,
        },
    )];
    for node in 0..3 {
        let empty = Fault::NodeKill {
            node,
            down_s: 12.0,
            empty: true,
        };
        faults.push(at(30.0 + 18.0 * node as f64, empty));
    }
    case("rolling_empty_restart_under_pause", true, faults);
}

/// Under a pause, one node restarted empty while every replica is down (none there to write
/// the pause back onto it): the new processes know no pause of their own and read it from the
/// nodes; the empty node's silence must not
/// outvote the two that hold it (the newest change of a majority wins).
#[test]
fn a_pause_holds_through_an_empty_node_and_a_fleet_restart() {
    let pause = Fault::Pause {
        job: 0,
        for_s: 40.0,
        clock_off_s: -120,
    };
    let empty = Fault::NodeKill {
        node: 0,
        down_s: 2.0,
        empty: true,
    };
    let mut faults = vec![at(25.0, pause), at(30.0, empty)];
    for replica in 0..3 {
        let crash = Fault::ReplicaCrash {
            replica,
            down_s: 1.5,
        };
        faults.push(at(31.0, crash));
    }
    case("pause_through_empty_node_and_restart", true, faults);
}

#[test]
fn a_slot_made_to_run_twice_keeps_its_fences_and_time() {
    // Beyond the assumptions: two of three nodes lose their keys at once, after the slot's
    // candidates raced and before the lookout (250 ms after the last candidate) looks: the
    // lookout finds the slot free and runs it again, under the same fence. It must be listed
    // twice and flagged (`duplicate_listed_twice`).
    let empty = |node| Fault::NodeKill {
        node,
        down_s: 0.1,
        empty: true,
    };
    let faults = vec![at(40.15, empty(0)), at(40.15, empty(1))];
    case("slot_run_twice", false, faults);
}

/// One replica's egress broken for 40 s: each slot it wins is handed off (nothing left it) and
/// delivered by another, within its deadline (liveness judges these slots).
#[test]
fn broken_egress_hands_each_won_slot_off() {
    let egress = Fault::Egress {
        replica: 0,
        for_s: 40.0,
    };
    case("broken_egress", true, vec![at(30.0, egress)]);
}

/// Two replicas' egress broken at once, one longer: the third delivers what they win.
#[test]
fn broken_egress_on_two_replicas_hands_off_to_the_third() {
    let faults = vec![
        at(
            30.0,
            Fault::Egress {
                replica: 0,
                for_s: 20.0,
            },
        ),
        at(
            35.0,
            Fault::Egress {
                replica: 1,
                for_s: 10.0,
            },
        ),
    ];
    case("broken_egress_two", true, faults);
}

/// The whole fleet down for 12 s (every replica killed), then restarted: catch-up runs the
/// slots nobody ran, each once, and none from before the fleet first scheduled the job.
#[test]
fn the_whole_fleet_down_across_slots_catches_up() {
    let faults = (0..3)
        .map(|replica| {
            let crash = Fault::ReplicaCrash {
                replica,
                down_s: 12.0,
            };
            at(40.5, crash)
        })
        .collect();
    case("whole_fleet_down", true, faults);
}

#[test]
fn a_hung_node() {
    case(
        "hung_node",
        true,
        vec![at(
            30.0,
            Fault::NodeHang {
                node: 0,
                for_s: 40.0,
            },
        )],
    );
}

#[test]
fn two_of_three_nodes_down() {
    let faults = vec![
        at(
            30.0,
            Fault::NodeKill {
                node: 0,
                down_s: 20.0,
                empty: false,
            },
        ),
        at(
            30.0,
            Fault::NodeKill {
                node: 1,
                down_s: 20.0,
                empty: false,
            },
        ),
    ];
    case("two_of_three_nodes_down", true, faults);
}

#[test]
fn wall_clock_steps_of_90s_either_way() {
    let faults = vec![
        at(
            30.0,
            Fault::ReplicaClock {
                replica: 0,
                step_ms: 90_000,
            },
        ),
        at(
            30.0,
            Fault::ReplicaClock {
                replica: 1,
                step_ms: -90_000,
            },
        ),
    ];
    case("wall_step_90s", true, faults);
}

#[test]
fn ambiguous_sends() {
    let faults = [30.0, 45.0, 60.0]
        .into_iter()
        .map(|t| at(t, Fault::Ambiguous { count: 2 }))
        .collect();
    case("ambiguous_send", true, faults);
}

/// Two of three node clocks stepped back 900 ms between two slots (inside `max_clock_skew`):
/// the nodes' lower median moves back, so the next slot's timer, set on the fleet time measured
/// before, fires 900 ms ahead of the nodes' time. The guard measures again and waits the slot
/// out (within `EARLY_WAIT`): never early on the nodes' time.
#[test]
fn two_node_clocks_stepped_back_within_the_early_wait() {
    let back = |node| Fault::NodeClock {
        node,
        step_ms: -900,
    };
    case(
        "node_clocks_back",
        true,
        vec![at(40.5, back(0)), at(40.5, back(1))],
    );
}

#[test]
fn a_node_clock_stepped() {
    case(
        "node_clock_step",
        true,
        vec![at(
            30.0,
            Fault::NodeClock {
                node: 0,
                step_ms: 1_500,
            },
        )],
    );
}

#[test]
fn replies_lost_after_apply_and_resets() {
    let faults = vec![
        at(30.0, Fault::LoseReplies { node: 0, count: 3 }),
        at(40.0, Fault::ResetNode { node: 1 }),
        at(
            50.0,
            Fault::Cut {
                replica: 2,
                node: 2,
                for_s: 5.0,
            },
        ),
    ];
    case("lost_replies_and_resets", true, faults);
}

#[test]
fn replicas_killed_mid_run() {
    let faults = vec![
        at(
            30.3,
            Fault::ReplicaCrash {
                replica: 0,
                down_s: 5.0,
            },
        ),
        at(
            30.3,
            Fault::ReplicaCrash {
                replica: 1,
                down_s: 8.0,
            },
        ),
    ];
    case("replicas_killed_mid_run", true, faults);
}

/// One replica's answers from two of the three nodes lost for 20 s while its requests still
/// reach them and apply (a one-way partition): the third node keeps its fleet clock measured,
/// so it goes on racing, and its `SET`s on the two time out, including those that met another
/// replica's win there. A race left open so is released on the nodes that did not answer, and
/// that release must take back only its own token: one that deletes whatever holds the key
/// frees a won slot on a majority, and the lookout, looking after it, wins the slot a second
/// time (the planted bug 06: caught here, `at_most_once` and `fences_increase`).
#[test]
fn a_one_way_partition_of_one_replica_from_two_nodes() {
    let faults = [0, 2]
        .into_iter()
        .map(|node| {
            let one_way = Fault::OneWay {
                replica: 1,
                node,
                for_s: 20.0,
            };
            at(30.0, one_way)
        })
        .collect();
    case("one_way_partition", true, faults);
}

/// Every node's clock 0.95 % fast (inside Redlock's 1 % drift allowance), and a job whose
/// timeout (20 min) makes its key live 1209 s: on the nodes' clocks the key ends 1197.6 s
/// after it was set, 11.4 s short of its TTL. The winner's first send gets a 429 asking for a
/// pause of 1198.5 s, inside the timeout: with the drift allowance (12.1 s) the lock's
/// validity ends first and the winner gives up; without it (the planted bug 02) it sends after
/// its key ran out on every node (`never_stale`, read on the nodes). `j0`, every 10 s, keeps
/// the fleet's other slots judged.
#[test]
fn node_clocks_running_fast_and_a_send_at_the_end_of_a_long_lock() {
    fast_nodes_and_a_send_at_the_end_of_a_long_lock("long_lock_fast_nodes", 9_500, 1198.5);
}

/// A rolling update, one replica every 20 s (stopped as a deployment stops it, back 2 s later),
/// whose new version moves `j0` from every 2 s to every second, keeps `j1`, drops `j2` and adds
/// `j3`; each replica judges the others' versions by what they announce. Through the rollout no
/// slot runs twice or early, and every slot of a version some replica runs is delivered:
/// `j0`'s odd seconds from the first new replica on, `j2`'s while an old one is left, `j3`'s
/// from the first new one (liveness judges the whole rollout: a replica's restart is no fault
/// of the slot's).
#[test]
fn a_rollout_that_moves_a_job() {
    let step = |replica| Fault::Rollout {
        replica,
        down_s: 2.0,
    };
    let faults = vec![at(30.0, step(0)), at(50.0, step(1)), at(70.0, step(2))];
    let every = "* * * * * *";
    let plan = Plan {
        job_specs: vec![
            job("j0", "*/2 * * * * *", 5),
            job("j1", every, 5),
            job("j2", every, 5),
        ],
        rolled_out: vec![
            job("j0", every, 5),
            job("j1", every, 5),
            job("j3", every, 5),
        ],
        ..plan("rollout_moves_a_job", true, faults)
    };
    cases::check(&plan.name, &plan);
}

/// Split votes on every slot: every replica races every slot at once (`candidates = "all"`),
/// and each stands 1 ms from a node of its own and 5 ms from the other two, so each one's `SET`
/// reaches its own node first and the first attempt splits 1-1-1. The racers give back what
/// they took on a minority (the first in line, r0, keeps its node and asks again 5 ms later),
/// so the second attempt decides the slot: every slot delivered (liveness), each within 300 ms
/// of its slot (`on_time`; 119 to 150 ms here: a connection serves its requests one at a
/// time, each a round trip, so a batch of 3 `SET`s on a far link takes 30 ms). A race that keeps
/// its minority keys (`Race::is_won` always true: no `partial` release) splits again on every
/// attempt until they run out, and no slot runs (`liveness`); a decided race asked again on
/// every attempt (`Race::is_open` always true) spends the whole retry budget first, and its
/// slots arrive 520 to 670 ms late (`on_time`). 50 s simulated.
#[test]
fn split_votes_on_every_slot_are_given_back_and_decided() {
    let faults = (0..3)
        .flat_map(|replica| (0..3).map(move |node| (replica, node)))
        .map(|(replica, node)| {
            let ms = if replica == node { 1 } else { 5 };
            at(0.0, Fault::Latency { replica, node, ms })
        })
        .collect();
    let plan = Plan {
        horizon_s: 50,
        candidates: Some("\"all\"".to_owned()),
        on_time_ms: Some(300),
        ..plan("split_votes", true, faults)
    };
    cases::check(&plan.name, &plan);
}

/// The drift allowance's last milliseconds: every node clock 1.0102 % fast, the most the
/// allowance (1 % of the TTL plus 2 ms) still covers for the long job's 1209 s key, which then
/// ends 1196.9087 s after it was set, on the nodes' clocks; the lock's validity ends 1196.908 s
/// after the race (the race itself takes no time here: no link has a latency). The first send's
/// 429 asks for a pause of 1196.910 s, between the two: the winner gives up. With the fixed
/// 2 ms subtracted instead of added (a validity 4 ms longer) it sends after its key ran out on
/// every node (`never_stale`, read on the nodes).
#[test]
fn node_clocks_fast_by_the_whole_drift_allowance_and_a_send_in_its_last_milliseconds() {
    fast_nodes_and_a_send_at_the_end_of_a_long_lock("drift_allowance_edge", 10_102, 1196.910);
}

/// The two drift cases' shared plan: every node's clock `ppm` fast from the start, the job
/// `long` (its 20 min timeout makes its key live 1209 s) whose first send at 29.5 s gets a 429
/// asking for a pause of `retry_after_s`, and `j0` every 10 s to keep the fleet's other slots
/// judged; 1260 s simulated, to past the long job's key.
fn fast_nodes_and_a_send_at_the_end_of_a_long_lock(name: &str, ppm: i64, retry_after_s: f64) {
    let mut faults: Vec<Timed> = (0..3)
        .map(|node| at(0.0, Fault::NodeDrift { node, ppm }))
        .collect();
    let busy = Fault::ReceiversBusy {
        retry_after_s,
        for_s: 1.0,
    };
    faults.push(at(29.5, busy));
    let plan = Plan {
        horizon_s: 1260,
        job_specs: vec![
            job("long", "30 0 0 * * *", 1200),
            job("j0", "*/10 * * * * *", 5),
        ],
        ..plan(name, true, faults)
    };
    cases::check(&plan.name, &plan);
}

/// A run that outlasts its running lease: the receivers ask the 30 s slot's first send to come
/// back 14 s later, so the run lasts from 30 s to 44 s, past the 6 s lease on the job. The
/// winner extends the lease while it waits, so the job's slots at 35 s and 40 s are skipped as
/// overlapping (`overlap = "skip"`, the default) and no second run reaches a receiver while the
/// first is in flight (`one_run_at_a_time`); from 45 s the job runs again (liveness, from 50 s).
/// With the extension not sent, the lease runs out at 36 s and the 40 s slot runs beside it.
#[test]
fn a_run_that_outlasts_its_running_lease_keeps_the_next_slots_off() {
    let busy = Fault::ReceiversBusy {
        retry_after_s: 14.0,
        for_s: 1.0,
    };
    let plan = Plan {
        job_specs: vec![job("slow", "*/5 * * * * *", 30)],
        one_run_at_a_time: true,
        ..plan("run_outlasts_its_lease", true, vec![at(29.5, busy)])
    };
    cases::check(&plan.name, &plan);
}

/// One node down and another's clock ahead: n0 killed for 40 s, n1's clock stepped 1.5 s
/// ahead (inside the 2 s skew allowed) at the same moment. The replicas measure the fleet's
/// time on the two that answer, and the lower of the two middle samples keeps the fleet clock
/// on n2's time: late rather than early (`never_early`, on the lower median of every node's
/// clock). With the median's index computed wrong (`(n - 1) % 2` or `n / 2`: the higher of two)
/// the fleet follows n1 and sends 1.5 s early.
#[test]
fn one_node_down_and_another_nodes_clock_ahead() {
    let down = Fault::NodeKill {
        node: 0,
        down_s: 40.0,
        empty: false,
    };
    let ahead = Fault::NodeClock {
        node: 1,
        step_ms: 1_500,
    };
    case(
        "down_and_ahead",
        true,
        vec![at(30.0, down), at(30.0, ahead)],
    );
}
