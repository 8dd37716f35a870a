//! Secrets redacted at the type level: a webhook URL or a Redis URL prints without its key,
//! token or password, so no log line, error or `check` output can leak one by accident.

use std::fmt;

use url::Url;

/// Path segments at least this long are treated as tokens (Feishu's `/hook/{id}`, Slack's
/// `/services/T…/B…/X…`) and hidden along with the query.
const TOKEN_SEGMENT_LEN: usize = 16;

const MASK: &str = "***";

/// A URL that carries a credential somewhere (query key, path token, password).
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(Url);

impl SecretUrl {
    /// Wraps `url`; its secret parts never print.
    pub fn new(url: Url) -> Self {
        SecretUrl(url)
    }

    /// The real URL, for the one place that sends to it.
    pub fn expose(&self) -> &Url {
        &self.0
    }

    /// The parts of the URL that must never be printed, for scrubbing free text.
    pub fn secret_parts(&self) -> Vec<String> {
        let mut parts: Vec<String> = self.0.query_pairs().map(|(_, v)| v.into_owned()).collect();
        parts.extend(self.0.password().map(str::to_owned));
        parts.extend(
            self.0
                .path_segments()
                .into_iter()
                .flatten()
                .filter(|s| s.len() >= TOKEN_SEGMENT_LEN)
                .map(str::to_owned),
        );
        parts.retain(|p| p.len() >= 4);
        parts
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(redacted(&self.0).as_str())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretUrl({self})")
    }
}

/// Why a URL did not parse, in plain words (the url crate says "relative URL without a base"
/// for a URL without its scheme).
pub fn url_parse_problem(e: url::ParseError) -> String {
    use url::ParseError as E;
    match e {
        E::RelativeUrlWithoutBase => "it has no scheme".to_owned(),
        E::EmptyHost => "it has no host".to_owned(),
        E::InvalidPort => "its port is not a number from 0 to 65535".to_owned(),
        E::InvalidIpv4Address | E::InvalidIpv6Address => "its IP address is not valid".to_owned(),
        E::InvalidDomainCharacter | E::IdnaError => {
            "its host has a character a host name cannot have".to_owned()
        }
        other => other.to_string(),
    }
}

/// `url` with its password, query values and token-like path segments masked.
pub fn redacted(url: &Url) -> Url {
    let mut out = url.clone();
    if out.password().is_some() {
        let _ = out.set_password(Some(MASK));
    }
    if let Some(segments) = url.path_segments() {
        let masked: Vec<&str> = segments
            .map(|s| {
                if s.len() >= TOKEN_SEGMENT_LEN {
                    MASK
                } else {
                    s
                }
            })
            .collect();
        out.set_path(&masked.join("/"));
    }
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, _)| (k.into_owned(), MASK.to_owned()))
        .collect();
    if pairs.is_empty() {
        out.set_query(None);
    } else {
        let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.set_query(Some(&query.join("&")));
    }
    out
}

/// A string secret (a header value, a password) that prints as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`; it never prints.
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

/// Scrubs known secret values out of free text (error messages from libraries that may echo a
/// URL or a body): the last line of defence after the typed redaction above.
#[derive(Clone, Debug, Default)]
pub struct Scrubber {
    secrets: Vec<Secret>,
}

impl Scrubber {
    /// Scrubs `value` from every later message (a secret read from a file or the environment).
    pub fn add(&mut self, value: &str) {
        if value.len() >= 4 && !self.secrets.iter().any(|s| s.expose() == value) {
            self.secrets.push(Secret::new(value.to_owned()));
        }
    }

    /// `text` with every known secret replaced.
    pub fn scrub(&self, text: &str) -> String {
        self.secrets
            .iter()
            .fold(text.to_owned(), |acc, s| acc.replace(s.expose(), MASK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wecom_key_is_hidden() {
        let url =
            Url::parse("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=abcd-1234").unwrap();
        let shown = SecretUrl::new(url).to_string();
        assert_eq!(
            shown,
            "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=***"
        );
    }

    #[test]
    fn password_and_path_tokens_are_hidden() {
        let url = Url::parse(
            "https://u:hunter22@hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX",
        )
        .unwrap();
        let shown = SecretUrl::new(url.clone()).to_string();
        assert!(!shown.contains("hunter22"), "{shown}");
        assert!(!shown.contains("XXXXXXXXXXXXXXXX"), "{shown}");
        assert!(
            shown.contains("hooks.slack.com/services/T000/B000/***"),
            "{shown}"
        );
        assert!(
            SecretUrl::new(url)
                .secret_parts()
                .contains(&"hunter22".to_owned())
        );
    }

    #[test]
    fn scrubber_removes_known_values() {
        let mut s = Scrubber::default();
        s.add("topsecret");
        assert_eq!(s.scrub("error at topsecret/x"), "error at ***/x");
    }
}
