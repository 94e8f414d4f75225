//! The second stage: a cross-modal re-ranker re-scores the first stage's best candidates.

use std::time::Instant;

use lexlip_index::Snapshot;
use lexlip_model::Reranker;
use lexlip_proto::Modality;
use lexlip_proto::api::{Hit, RerankReport, Stage};

use crate::error::SearchError;

/// What the re-ranker reads of the query: the query itself, not its vector.
#[derive(Debug, Clone, Copy)]
pub enum RerankQuery<'a> {
    Text(&'a str),
    /// Encoded image bytes.
    Image(&'a [u8]),
}

/// Re-scores the first `top` hits that the re-ranker can read (image hits with a stored
/// thumbnail for a text query, text hits for an image query) and puts them first, best match
/// first; the other hits follow in first-stage order. Only first-stage candidates are returned.
pub fn rerank(
    model: &Reranker,
    snapshot: &Snapshot,
    query: RerankQuery<'_>,
    hits: Vec<Hit>,
    top: usize,
) -> Result<(Vec<Hit>, RerankReport), SearchError> {
    let started = Instant::now();
    let n = top.min(hits.len());
    let encoder = model.towers().image_encoder();
    let mut scorable = Vec::new();
    let mut images = Vec::new();
    let mut texts = Vec::new();
    for (i, hit) in hits.iter().take(n).enumerate() {
        match (query, hit.modality) {
            (RerankQuery::Text(_), Modality::Image) => {
                let thumbnail = snapshot.get(&hit.id, false)?.and_then(|d| d.thumbnail);
                if let Some(bytes) = thumbnail {
                    let image = encoder.preprocess_named(&bytes, &hit.id).map_err(|e| {
                        SearchError::Rerank(format!("thumbnail of {}: {e}", hit.id))
                    })?;
                    images.push(image);
                    scorable.push(i);
                }
            }
            (RerankQuery::Image(_), Modality::Text) => {
                if let Some(text) = &hit.text {
                    texts.push(text.as_str());
                    scorable.push(i);
                }
            }
            _ => {}
        }
    }
    let scores = match query {
        RerankQuery::Text(t) if !images.is_empty() => model.score_text_images(t, &images),
        RerankQuery::Image(bytes) if !texts.is_empty() => {
            let image = encoder
                .preprocess_named(bytes, "query.image")
                .map_err(|e| SearchError::invalid(format!("query.image: {e}")))?;
            model.score_image_texts(&image, &texts)
        }
        _ => Ok(Vec::new()),
    }
    .map_err(|e| SearchError::Rerank(e.to_string()))?;

    let mut out = Vec::with_capacity(hits.len());
    let mut hits: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
    for k in lexlip_model::rerank::order_by_score(&scores) {
        if let Some(mut hit) = hits[scorable[k]].take() {
            hit.first_stage_score = Some(hit.score);
            hit.score = f64::from(scores[k]);
            hit.stage = Some(Stage::Rerank);
            out.push(hit);
        }
    }
    for mut hit in hits.into_iter().flatten() {
        hit.stage = Some(Stage::First);
        out.push(hit);
    }
    let report = RerankReport {
        scored: scores.len(),
        unscored: n - scores.len(),
        took_ms: started.elapsed().as_secs_f64() * 1000.0,
    };
    Ok((out, report))
}
