//! `--shard i/n`: a deterministic 1/n of the inputs, by a hash of each item's group (an image
//! and its captions stay together), so n machines can build parts that merge into the whole.

use std::str::FromStr;

use crate::progress::fnv1a;
use lexlip_corpus::item::SourceItem;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    pub fn contains(&self, group: &str) -> bool {
        fnv1a(group.as_bytes()) % u64::from(self.count) == u64::from(self.index)
    }

    /// Whether a reader's item (or bad item) belongs to this shard.
    pub fn holds(&self, item: &SourceItem) -> bool {
        match item {
            Ok(i) => self.contains(&i.group),
            Err(b) => self.owns(b.group()),
        }
    }

    /// Whether this shard reports an item that may have no id (a malformed line): those belong
    /// to shard 0, so that the parts' counts add up to an unsharded run's.
    pub fn owns(&self, id: Option<&str>) -> bool {
        match id {
            Some(id) => self.contains(id),
            None => self.index == 0,
        }
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("shard must be i/n with 0 <= i < n, got {s:?}");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_groups() {
        let shards: Vec<Shard> = (0..3).map(|i| format!("{i}/3").parse().unwrap()).collect();
        for g in 0..500 {
            let group = format!("image-{g}");
            assert_eq!(shards.iter().filter(|s| s.contains(&group)).count(), 1);
        }
        assert!("3/3".parse::<Shard>().is_err());
        assert!("1/0".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
    }
}
