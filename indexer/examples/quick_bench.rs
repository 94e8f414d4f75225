//! Runs the engine benchmark with the library defaults and prints JSON (`lexlip bench engine`
//! is the user-facing form). `quick_bench [docs] [topical|independent] [block size]` (no block
//! size: each segment's layout's own).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let docs = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let cfg = lexlip_index::bench::EngineBenchConfig {
        docs,
        queries: 200,
        seed: 1,
        k: 10,
        approx: vec![1.1, 1.25, 1.5, 2.0, 3.0],
        term_cuts: vec![0.05, 0.1],
        corpus: std::env::args()
            .nth(2)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or_default(),
        block_size: std::env::args().nth(3).and_then(|s| s.parse().ok()),
        layout: None,
        threads: vec![2],
        forward_files: true,
    };
    let r = lexlip_index::bench::run(&cfg, dir.path(), &mut |p, f| eprintln!("{p} {f:.2}"))?;
    println!("{}", serde_json::to_string_pretty(&r)?);
    Ok(())
}
