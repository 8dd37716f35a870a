//! A node's address and its client: the checked `redis://` URL ([`NodeUrl`]), why one is not
//! usable, and the redis-rs client built from it. The lowest file of `redis/`: the node, the
//! cluster connection and the `ASK` path all reach a server from here.

use std::fmt;
use std::time::Duration;

use redis::IntoConnectionInfo;
use redis::io::tcp::TcpSettings;
use url::Url;

/// How long a (re)connection attempt may take; requests never wait for it beyond the node timeout.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Bound on the answers of a server just connected to: a first connection takes longer than a
/// race's `node_timeout`. Sentinel mode's resolution (the sentinels, then `HELLO` on the primary
/// they name) and a `WAIT` on a new primary's fresh connection wait this much more.
pub(super) const FIRST_CONNECTION_WAIT: Duration = Duration::from_millis(500);

/// Why a `nodes` entry is not a usable Redis URL.
#[derive(Debug, thiserror::Error)]
pub enum BadNodeUrl {
    /// Not a URL at all.
    #[error(
        "not a URL ({}): write it in full, such as \"redis://10.0.0.1:6379\" (rediss:// for TLS)",
        crate::secret::url_parse_problem(*.0)
    )]
    NotUrl(url::ParseError),
    /// A URL of another scheme (`http://…`).
    #[error("scheme {0:?} is not a Redis URL (use redis:// or rediss://)")]
    Scheme(String),
    /// `redis://` with no host.
    #[error("the URL has no host")]
    NoHost,
    /// A URL the Redis client refuses.
    #[error("not a Redis URL: {0}")]
    NotRedis(redis::RedisError),
}

/// A node's client that could not be prepared: the (redacted) URL and the client's reason.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {source}")]
pub struct NodeSetupError {
    /// The node, printed without its password.
    pub url: NodeUrl,
    /// The Redis client's reason.
    pub source: redis::RedisError,
}

/// A checked `redis://` or `rediss://` URL; prints without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeUrl(Url);

impl NodeUrl {
    /// Checks `raw` as a Redis URL with a host (the password stays inside, never printed).
    pub fn parse(raw: &str) -> Result<Self, BadNodeUrl> {
        let url = match Url::parse(raw) {
            // `localhost:6379` parses, as the scheme "localhost".
            Ok(_) if !raw.contains("://") => Err(url::ParseError::RelativeUrlWithoutBase),
            parsed => parsed,
        }
        .map_err(BadNodeUrl::NotUrl)?;
        match url.scheme() {
            "redis" | "rediss" => {}
            other => return Err(BadNodeUrl::Scheme(other.to_owned())),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(BadNodeUrl::NoHost);
        }
        raw.into_connection_info().map_err(BadNodeUrl::NotRedis)?;
        Ok(NodeUrl(url))
    }

    /// The URL with its password, for the client only.
    pub fn expose(&self) -> &Url {
        &self.0
    }

    /// `host:port`, the node's name in logs.
    pub fn address(&self) -> String {
        let host = self.0.host_str().unwrap_or("?");
        format!("{host}:{}", self.0.port().unwrap_or(6379))
    }

    /// The password, so it is scrubbed from logs.
    pub fn password(&self) -> Option<&str> {
        self.0.password()
    }
}

impl fmt::Display for NodeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::secret::redacted(&self.0).fmt(f)
    }
}

impl fmt::Debug for NodeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeUrl({self})")
    }
}

/// A client of `url` (with `ca_file`'s roots for `rediss://`), its sockets with TCP_NODELAY.
pub(super) fn client(
    url: &NodeUrl,
    ca_file: Option<&[u8]>,
) -> Result<redis::Client, NodeSetupError> {
    let setup = |source| NodeSetupError {
        url: url.clone(),
        source,
    };
    crate::tls::ensure_crypto_provider();
    let info = url
        .expose()
        .as_str()
        .into_connection_info()
        .map_err(setup)?
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    match ca_file {
        Some(ca) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca.to_vec()),
            },
        ),
        None => redis::Client::open(info),
    }
    .map_err(setup)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls() {
        assert!(NodeUrl::parse("redis://127.0.0.1:6379").is_ok());
        assert!(NodeUrl::parse("rediss://:pw@redis.example:6380/0").is_ok());
        assert!(
            NodeUrl::parse("http://127.0.0.1:6379")
                .unwrap_err()
                .to_string()
                .contains("not a Redis URL")
        );
        assert!(NodeUrl::parse("localhost:6379").is_err());
        let url = NodeUrl::parse("redis://user:hunter22@10.0.0.1:6379").unwrap();
        assert!(!url.to_string().contains("hunter22"));
        assert_eq!(url.address(), "10.0.0.1:6379");
    }
}
