//! The operator: `pause` and `resume` through the fleet's own control path (slotcron's
//! `fleet::control` over a pool of its own, dialed like a replica's), from a machine whose
//! clock is off: the pause is stamped on the nodes' time, so its clock does not matter.

use std::sync::Arc;
use std::time::Duration;

use slotcron::unstable::fleet::control::{Control, PauseOrder};
use slotcron::unstable::redis::{NodeUrl, Nodes};

use crate::fleet::Shape;
use crate::net;
use crate::world::Shared;

/// The operator's name: its own dialer and incarnation.
const OPERATOR: &str = "operator";
/// The bound on one of its requests (the CLI's node timeout).
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// A pool of `name`'s own over the fleet's nodes (the CLI's, dialed like a replica's).
pub fn nodes(world: &Shared, shape: &Shape, name: &str) -> Nodes {
    world.lock().incarnation.insert(name.to_owned(), 0);
    let urls: Vec<NodeUrl> = (0..shape.nodes)
        .map(|i| NodeUrl::parse(&format!("redis://n{i}:6379")).expect("a node URL"))
        .collect();
    let dialer = net::dialer(world, name, 0);
    Nodes::dial(&urls, NODE_TIMEOUT, &dialer, name)
}

fn control(world: &Shared, shape: &Shape) -> Control {
    Control::redis(Arc::new(nodes(world, shape, OPERATOR)), "sim")
}

/// Pauses `j<job>` for `for_s` seconds, then resumes it; the pause as taken goes to the world.
pub async fn pause_for(world: &Shared, shape: &Shape, job: usize, for_s: f64) {
    let (control, name) = (control(world, shape), format!("j{job}"));
    let order = PauseOrder {
        by: OPERATOR.to_owned(),
        until: None,
        reason: Some("simulated operator".to_owned()),
    };
    let taken = control.pause(&name, &order).await.is_ok();
    let (index, taken) = {
        let mut w = world.lock();
        let now = w.now_us();
        w.event(|| format!("pause {name} taken={taken}"));
        w.pauses.push((name.clone(), now, None));
        (w.pauses.len() - 1, taken)
    };
    tokio::time::sleep(Duration::from_secs_f64(for_s)).await;
    // Resumed until a majority takes it (the operator tries again, as a person would).
    while control.resume(&name, OPERATOR).await.is_err() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut w = world.lock();
    let now = w.now_us();
    match taken {
        true => w.pauses[index].2 = Some(now),
        false => drop(w.pauses.remove(index)),
    }
    w.event(|| format!("resume {name}"));
}
