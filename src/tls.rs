//! TLS set-up shared by the two rustls users (reqwest for webhooks, redis-rs for `rediss://`).

/// Installs the ring crypto provider as rustls's process default. Both clients are built with
/// `rustls` but without a provider of their own (to keep the build small), so this must run
/// before either builds a client; a second call is a no-op.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing the same provider is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
