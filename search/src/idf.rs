//! Weighting a sparse query by how rare its terms are in the collection searched.
//!
//! A lexicon model learns its weights against the other items of a training batch, not against
//! the collection it will search. Among a million pictures, terms that a model puts on the
//! kind of picture rather than on the picture (`flags`, `country`, `food`) are held by tens of
//! thousands of documents, and a query's score is spread over all of them. BM25 answers this
//! with an inverse document frequency; here each query impact is multiplied by
//! `ln(1 + N / df)^α`, with N the documents the search's filter allows and df those of them
//! holding the term. The search stays an exact dot product, with the weighted query.
//!
//! ```
//! use lexlip_index::TermFrequencies;
//! use lexlip_proto::QuantizedVector;
//! let q = QuantizedVector::new([("dog", 100u64), ("picture", 100)]).unwrap();
//! // 1,000 documents: 10 hold `dog`, 900 `picture`.
//! let f = TermFrequencies { docs: 1000, df: vec![10, 900] };
//! let w = lexlip_search::idf::weighted(&q, &f, 1.0);
//! assert_eq!(w.get("dog"), Some(462)); // 100 · ln(1 + 100)
//! assert_eq!(w.get("picture"), Some(75)); // 100 · ln(1 + 1.11)
//! ```

use lexlip_index::TermFrequencies;
use lexlip_proto::MAX_IMPACT;
use lexlip_proto::QuantizedVector;

/// Largest exponent a plan accepts (the one rule is in `lexlip_proto::idf`).
pub use lexlip_proto::idf::MAX_IDF;

/// `query` with each impact multiplied by `ln(1 + docs / max(df, 1))^alpha`, rounded, kept
/// within 1..=`MAX_IMPACT` (a term no document holds weighs as one held by one). `alpha` 0, or
/// no document to search, gives the query back.
pub fn weighted(
    query: &QuantizedVector,
    frequencies: &TermFrequencies,
    alpha: f32,
) -> QuantizedVector {
    if alpha == 0.0 || frequencies.docs == 0 {
        return query.clone();
    }
    let docs = frequencies.docs as f64;
    let entries = query
        .iter()
        .zip(&frequencies.df)
        .map(|((term, impact), &df)| {
            let idf = (1.0 + docs / df.max(1) as f64).ln();
            let w = (f64::from(impact) * idf.powf(f64::from(alpha))).round();
            (term, w.clamp(1.0, f64::from(MAX_IMPACT)) as u64)
        });
    QuantizedVector::new(entries).expect("the terms of a valid query, impacts within range")
}
