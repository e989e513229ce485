//! Embeddings behind one seam, [`Embedder`]: the built-in
//! [`LocalEmbedder`] (no network, no model download) and [`HttpEmbedder`]
//! for an OpenAI-compatible `/embeddings` endpoint.
//!
//! What the local embedder captures: surface similarity. Each text becomes
//! a hashed bag of word tokens (identifiers split at camelCase, `_`, `-`,
//! `.`, `/`) and of character trigrams of each token, signed-hashed into
//! [`LOCAL_DIMS`] buckets and L2-normalized. So `AuthService`,
//! `auth-service` and `authentication service` land close together, and a
//! query sharing word stems or spelling fragments with a node finds it.
//! What it does not capture: meaning without shared letters (synonyms such
//! as `login` / `sign-in`, `db` / `datastore`), word order, negation, or
//! any knowledge of the world; and hashing collisions add a little noise.
//! Keyword ranking is fused with it for exact terms; a real embedding
//! model behind [`HttpEmbedder`] is what brings semantic recall.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Dimensions of the local embedding.
pub const LOCAL_DIMS: usize = 128;

/// Model id recorded for local embeddings (changing the features must
/// change this id so stale vectors are recognised).
pub const LOCAL_MODEL: &str = "local-hash-ngram-v1";

/// Most texts sent in one HTTP embeddings request.
const HTTP_BATCH: usize = 256;

/// An embedding failure.
#[derive(Debug, thiserror::Error)]
#[error("embedding failed: {0}")]
pub struct EmbedError(pub String);

/// Future returned by [`Embedder::embed`].
pub type EmbedFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Vec<f32>>, EmbedError>> + Send + 'a>>;

/// Turns texts into L2-normalized vectors.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Model id stored with each vector; vectors of another model are not
    /// compared with this one's.
    fn model(&self) -> &str;
    /// Whether this is a configured external provider (then
    /// `graph_improve` re-embeds touched triplets).
    fn is_remote(&self) -> bool;
    /// One vector per text, in order.
    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a>;
}

/// The built-in feature-hashing embedder.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalEmbedder;

impl LocalEmbedder {
    /// Embeds one text synchronously.
    pub fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; LOCAL_DIMS];
        for token in super::text::tokens(text) {
            add_feature(&mut v, token.as_bytes(), 1.0);
            let padded: Vec<char> = format!(" {token} ").chars().collect();
            for w in padded.windows(3) {
                let tri: String = w.iter().collect();
                add_feature(&mut v, tri.as_bytes(), 0.5);
            }
        }
        normalize(&mut v);
        v
    }
}

/// Adds `weight` to the signed bucket of `feature` (one SHA-256 prefix
/// gives both the bucket and the sign, stable across platforms).
fn add_feature(v: &mut [f32], feature: &[u8], weight: f32) {
    let digest = Sha256::digest(feature);
    let h = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let bucket = (h as usize) % v.len().max(1);
    let sign = if digest[4] & 1 == 0 { 1.0 } else { -1.0 };
    if let Some(slot) = v.get_mut(bucket) {
        *slot += sign * weight;
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

impl Embedder for LocalEmbedder {
    fn model(&self) -> &str {
        LOCAL_MODEL
    }

    fn is_remote(&self) -> bool {
        false
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move { Ok(texts.iter().map(|t| LocalEmbedder::vector(t)).collect()) })
    }
}

/// An OpenAI-compatible embeddings endpoint (`POST {url}` with
/// `{"model", "input": [..]}`, answer `{"data": [{"index", "embedding"}]}`).
#[derive(Debug, Clone)]
pub struct HttpEmbedder {
    url: String,
    model_name: String,
    model_id: String,
    api_key: Option<String>,
    client: reqwest::Client,
}

impl HttpEmbedder {
    /// A provider at `url` (the full embeddings URL) for `model`.
    pub fn new(
        url: &str,
        model: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<HttpEmbedder, EmbedError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| EmbedError(format!("cannot build HTTP client: {e}")))?;
        Ok(HttpEmbedder {
            url: url.to_string(),
            model_name: model.to_string(),
            model_id: format!("http:{model}"),
            api_key,
            client,
        })
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut req = self
            .client
            .post(&self.url)
            .json(&json!({ "model": self.model_name, "input": texts }));
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| EmbedError(format!("request to the embeddings endpoint failed: {e}")))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(EmbedError(format!(
                "embeddings endpoint answered HTTP {status}"
            )));
        }
        let body: Value = resp
            .json()
            .await
            .map_err(|e| EmbedError(format!("embeddings answer is not JSON: {e}")))?;
        parse_openai(&body, texts.len())
    }
}

/// Reads an OpenAI-style embeddings answer, ordered by `index`.
fn parse_openai(body: &Value, expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
    let data = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or_else(|| EmbedError("embeddings answer has no `data` array".into()))?;
    let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (pos, item) in data.iter().enumerate() {
        let index = item
            .get("index")
            .and_then(Value::as_u64)
            .map(|i| i as usize)
            .unwrap_or(pos);
        let mut v: Vec<f32> = item
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or_else(|| EmbedError("an embeddings item has no `embedding` array".into()))?
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| EmbedError("an embedding holds a non-number".into()))?;
        if v.is_empty() {
            return Err(EmbedError("an embedding is empty".into()));
        }
        normalize(&mut v);
        let slot = out
            .get_mut(index)
            .ok_or_else(|| EmbedError(format!("embedding index {index} out of range")))?;
        *slot = Some(v);
    }
    let vectors: Option<Vec<Vec<f32>>> = out.into_iter().collect();
    let vectors = vectors.ok_or_else(|| EmbedError("the answer misses some embeddings".into()))?;
    if let Some(first) = vectors.first()
        && vectors.iter().any(|v| v.len() != first.len())
    {
        return Err(EmbedError("embeddings of different dimensions".into()));
    }
    Ok(vectors)
}

impl Embedder for HttpEmbedder {
    fn model(&self) -> &str {
        &self.model_id
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> EmbedFuture<'a> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(texts.len());
            for chunk in texts.chunks(HTTP_BATCH) {
                out.extend(self.embed_batch(chunk).await?);
            }
            Ok(out)
        })
    }
}

/// Dot product (cosine for normalized vectors); 0 for mismatched lengths.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_name_are_close() {
        let a = LocalEmbedder::vector("AuthService");
        let b = LocalEmbedder::vector("auth-service");
        let c = LocalEmbedder::vector("PostgresDB primary database");
        assert!(dot(&a, &b) > 0.99, "{}", dot(&a, &b));
        assert!(dot(&a, &c) < 0.5, "{}", dot(&a, &c));
        let q = LocalEmbedder::vector("how does authentication work");
        assert!(dot(&q, &a) > dot(&q, &c));
    }

    #[test]
    fn vectors_are_unit_length_or_zero() {
        let v = LocalEmbedder::vector("UserRepository loads users");
        let n: f32 = v.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-4);
        assert!(LocalEmbedder::vector("!!").iter().all(|x| *x == 0.0));
    }

    #[test]
    fn openai_answers_are_parsed_in_index_order() {
        let body = json!({"data": [
            {"index": 1, "embedding": [0.0, 2.0]},
            {"index": 0, "embedding": [3.0, 0.0]}
        ]});
        let v = parse_openai(&body, 2).unwrap();
        assert_eq!(v, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
        assert!(parse_openai(&json!({"data": []}), 1).is_err());
        assert!(parse_openai(&json!({"nope": 1}), 1).is_err());
        assert!(parse_openai(&json!({"data": [{"embedding": ["x"]}]}), 1).is_err());
    }
}
