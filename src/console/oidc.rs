//! The console as an OpenID Connect relying party: people sign in with the
//! configured provider (authorization code + PKCE, `config`).

pub mod config;
