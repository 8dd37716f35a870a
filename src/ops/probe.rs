//! `slotcron health`: a GET of the replica's own `/healthz`, for Docker's `HEALTHCHECK` (the
//! runtime image has no curl), on the address the configuration's `[http] listen` names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Docker's HEALTHCHECK has its own timeout; this one keeps a hung server from holding the
/// probe until then.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The `/healthz` URL a local probe uses for `listen`: all addresses is reached on loopback.
pub fn healthz_url(listen: SocketAddr) -> String {
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}/healthz", SocketAddr::new(ip, listen.port()))
}

/// The answer of `/healthz`: `Ok(body)` on 200; `Err` with the status and body, or why no
/// answer came.
pub async fn healthz(listen: SocketAddr) -> Result<String, Unhealthy> {
    let url = healthz_url(listen);
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .map_err(Unhealthy::Client)?;
    let reply = client
        .get(&url)
        .send()
        .await
        .map_err(|source| Unhealthy::NoAnswer {
            url: url.clone(),
            source,
        })?;
    let status = reply.status();
    let body = reply.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(body)
    } else {
        Err(Unhealthy::Status { url, status, body })
    }
}

/// Why `slotcron health` found the replica unhealthy.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    /// The probe's HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(reqwest::Error),
    /// No answer came (refused, timed out).
    #[error("{url}: {source}")]
    NoAnswer {
        /// The `/healthz` URL asked.
        url: String,
        /// Why no answer came.
        source: reqwest::Error,
    },
    /// `/healthz` answered with a status other than 2xx.
    #[error("{url}: {status}: {body}")]
    Status {
        /// The `/healthz` URL asked.
        url: String,
        /// The status it answered.
        status: reqwest::StatusCode,
        /// The body it answered (why it is unhealthy).
        body: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_addresses_is_probed_on_loopback() {
        assert_eq!(
            healthz_url("0.0.0.0:9090".parse().unwrap()),
            "http://127.0.0.1:9090/healthz"
        );
        assert_eq!(
            healthz_url("[::]:9090".parse().unwrap()),
            "http://[::1]:9090/healthz"
        );
        assert_eq!(
            healthz_url("10.1.2.3:80".parse().unwrap()),
            "http://10.1.2.3:80/healthz"
        );
    }
}
