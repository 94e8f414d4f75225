//! `--shard I/N`: parsing, and every group owned by exactly one shard.

use lexlip_pipeline::Shard;

#[test]
fn shards_parse_and_partition() {
    let shards: Vec<Shard> = (0..4).map(|i| format!("{i}/4").parse().unwrap()).collect();
    let mut sizes = [0usize; 4];
    for g in 0..4000 {
        let group = format!("{g:09}");
        let owners: Vec<usize> = (0..4).filter(|&i| shards[i].contains(&group)).collect();
        assert_eq!(owners.len(), 1);
        sizes[owners[0]] += 1;
    }
    // Roughly even (FNV-1a of the group).
    assert!(sizes.iter().all(|&n| (800..1200).contains(&n)), "{sizes:?}");
    // Items without an id belong to shard 0 only.
    assert!(shards[0].owns(None) && !shards[1].owns(None));
    for bad in ["", "1", "2/2", "1/0", "a/b", "-1/2"] {
        assert!(bad.parse::<Shard>().is_err(), "{bad}");
    }
    assert_eq!(" 1 / 3 ".parse::<Shard>().unwrap().to_string(), "1/3");
}
