//! Sets and maps keyed by names, held as sorted vectors. A status read compares thousands of
//! names (stored machine ids, recorded pod names, the pods a view holds, the ids a report
//! names) that almost always arrive in order already: the store's machines of an acquire,
//! the watch cache's pods, a report sorted by id. Sorting input that is in order takes one
//! pass, and comparing two sorted lists is one merge; hashing every name of four 5,000-name
//! sets was a fifth of a status read through `orb serve`.

use std::cmp::Ordering;

/// Names, sorted and each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SortedNames<'a>(Vec<&'a str>);

impl<'a> SortedNames<'a> {
    pub fn new(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut names: Vec<&str> = names.into_iter().collect();
        // One pass when the names come in order (the common case).
        names.sort_unstable();
        names.dedup();
        Self(names)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.0.iter().copied()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.binary_search(&name).is_ok()
    }

    /// Whether every name of `other` is one of these.
    pub fn contains_all(&self, other: &SortedNames<'_>) -> bool {
        let mut mine = self.0.iter();
        other.0.iter().all(|wanted| mine.any(|name| name == wanted))
    }

    /// These names without those of `other`.
    pub fn minus(&self, other: &SortedNames<'_>) -> SortedNames<'a> {
        let mut theirs = other.0.iter().peekable();
        let mut left = Vec::with_capacity(self.0.len());
        for &name in &self.0 {
            while theirs.next_if(|t| **t < name).is_some() {}
            if theirs.peek().is_none_or(|t| **t != name) {
                left.push(name);
            }
        }
        SortedNames(left)
    }

    /// The names of both.
    pub fn union(self, other: SortedNames<'a>) -> SortedNames<'a> {
        if other.is_empty() {
            return self;
        }
        let mut all = Vec::with_capacity(self.0.len() + other.0.len());
        let (mut a, mut b) = (
            self.0.into_iter().peekable(),
            other.0.into_iter().peekable(),
        );
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => match x.cmp(y) {
                    Ordering::Less => a.next(),
                    Ordering::Greater => b.next(),
                    Ordering::Equal => {
                        b.next();
                        a.next()
                    }
                },
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            all.extend(next);
        }
        SortedNames(all)
    }
}

/// Values by name, sorted by name; of a name given more than once, the last value counts
/// (as a `HashMap` collected from the same pairs keeps it).
#[derive(Debug, Clone)]
pub struct SortedMap<'a, V>(Vec<(&'a str, V)>);

impl<'a, V> SortedMap<'a, V> {
    pub fn new(entries: impl IntoIterator<Item = (&'a str, V)>) -> Self {
        let mut entries: Vec<(&str, V)> = entries.into_iter().collect();
        // Stable, so equal names keep their order and the last of each run is the last given.
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut kept: Vec<(&str, V)> = Vec::with_capacity(entries.len());
        for entry in entries {
            match kept.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => kept.push(entry),
            }
        }
        Self(kept)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&V> {
        Some(&self.0[self.position(name)?].1)
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.0.binary_search_by(|(key, _)| (*key).cmp(name)).ok()
    }

    /// [`Self::get`] for names asked in order: `cursor` is where the last answer was found,
    /// so a name that follows it is found with one comparison; any other by a search.
    pub fn get_from(&self, cursor: &mut usize, name: &str) -> Option<&V> {
        if let Some((key, value)) = self.0.get(*cursor)
            && *key == name
        {
            *cursor += 1;
            return Some(value);
        }
        let at = self.position(name)?;
        *cursor = at + 1;
        Some(&self.0[at].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    const UNIVERSE: [&str; 5] = ["", "a", "orb-1-0000", "orb-1-0001", "z"];

    /// Every list of names from [`UNIVERSE`] a subset makes: in order, reversed, and with
    /// its first name repeated at the end.
    fn lists() -> Vec<Vec<&'static str>> {
        let mut lists = Vec::new();
        for bits in 0..1u32 << UNIVERSE.len() {
            let names: Vec<&str> = (0..UNIVERSE.len())
                .filter(|i| bits & (1 << i) != 0)
                .map(|i| UNIVERSE[i])
                .collect();
            let mut reversed = names.clone();
            reversed.reverse();
            let mut repeated = names.clone();
            repeated.extend(names.first().copied());
            lists.extend([names, reversed, repeated]);
        }
        lists
    }

    #[test]
    fn set_operations_agree_with_btree_sets_on_every_pair_of_lists() {
        let lists = lists();
        for a in &lists {
            for b in &lists {
                let (sa, sb) = (SortedNames::new(a.clone()), SortedNames::new(b.clone()));
                let (ba, bb): (BTreeSet<&str>, BTreeSet<&str>) =
                    (a.iter().copied().collect(), b.iter().copied().collect());
                let listed = |s: &SortedNames<'static>| s.iter().collect::<Vec<_>>();
                assert_eq!(listed(&sa), ba.iter().copied().collect::<Vec<_>>());
                assert_eq!(sa.len(), ba.len());
                assert_eq!(sa.contains_all(&sb), bb.is_subset(&ba), "{a:?} ⊇ {b:?}");
                assert_eq!(
                    listed(&sa.minus(&sb)),
                    ba.difference(&bb).copied().collect::<Vec<_>>(),
                    "{a:?} - {b:?}"
                );
                assert_eq!(
                    listed(&sa.clone().union(sb.clone())),
                    ba.union(&bb).copied().collect::<Vec<_>>(),
                    "{a:?} ∪ {b:?}"
                );
                for name in UNIVERSE.iter().chain(&["b", "orb-1-00000"]) {
                    assert_eq!(sa.contains(name), ba.contains(name));
                }
            }
        }
    }

    #[test]
    fn a_map_answers_as_a_hash_map_of_the_same_pairs() {
        let lists = lists();
        for keys in &lists {
            let pairs: Vec<(&str, usize)> = keys.iter().copied().zip(0..).collect();
            let hashed: HashMap<&str, usize> = pairs.iter().copied().collect();
            let sorted = SortedMap::new(pairs.iter().copied());
            assert_eq!(sorted.len(), hashed.len());
            for asked in &lists {
                let mut cursor = 0;
                for name in asked.iter().chain(keys).chain(&["b"]) {
                    assert_eq!(sorted.get(name), hashed.get(name), "{keys:?} [{name:?}]");
                    assert_eq!(sorted.get_from(&mut cursor, name), hashed.get(name));
                }
            }
        }
    }

    #[test]
    fn names_asked_in_order_are_found_at_the_cursor() {
        let map = SortedMap::new([("a", 1), ("b", 2), ("c", 3)]);
        let mut cursor = 0;
        assert_eq!(map.get_from(&mut cursor, "a"), Some(&1));
        assert_eq!(cursor, 1);
        assert_eq!(map.get_from(&mut cursor, "b"), Some(&2));
        assert_eq!(map.get_from(&mut cursor, "x"), None);
        assert_eq!(cursor, 2, "a miss leaves the cursor");
        assert_eq!(
            map.get_from(&mut cursor, "a"),
            Some(&1),
            "out of order: searched"
        );
        assert_eq!(cursor, 1);
    }
}
