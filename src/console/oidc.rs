//! The console as an OpenID Connect relying party: people sign in with the
//! configured provider (authorization code + PKCE, `config`), each sign-in
//! started is held server-side for a bounded time and count until its
//! callback spends it (`pending`), and `relying_party` runs the exchange,
//! checks the ID token and maps the person's groups to a console role.
//! The pages are `super::idp`.

pub mod config;
pub mod pending;
pub mod relying_party;
