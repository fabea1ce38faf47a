//! Lists bound one placeholder per item, in a few fixed lengths.
//!
//! A statement that changes a known set of rows by primary key (`WHERE id IN (?, …)`) is the
//! cheapest form on MySQL and MariaDB: a range read of the primary key, each row changed in
//! place. Joining the table to a `JSON_TABLE` instead makes the server stage every changed row
//! in an internal temporary table first (a multi-table `UPDATE` changes only the first table
//! of its join on the fly), on disk as soon as one assigned column is a TEXT. But one
//! placeholder per item would make a statement text per list length, and every connection
//! would prepare (and the server keep) hundreds of them. So a list is padded up to the next of
//! [`LENGTHS`] with [`NO_ID`], which names no row (in `IN (…)` it matches nothing, and a
//! `CASE id WHEN ?` bound to it never applies), and longer lists are cut: each statement shape
//! is prepared in at most `LENGTHS.len()` texts.

/// The list lengths statements are prepared for.
pub const LENGTHS: [usize; 7] = [16, 32, 64, 128, 256, 512, 1024];

/// The longest list.
pub const LONGEST: usize = LENGTHS[LENGTHS.len() - 1];

/// An id no row has (ids count up from 1): what padding binds.
pub const NO_ID: i64 = -1;

/// The prepared length a list of `n` items is padded to; `n` is at most [`LONGEST`].
pub fn length_for(n: usize) -> usize {
    debug_assert!(n <= LONGEST, "lists are cut at {LONGEST}, got {n}");
    LENGTHS
        .into_iter()
        .find(|&length| length >= n)
        .unwrap_or(LONGEST)
}

/// `ids` padded with [`NO_ID`] to their prepared length.
pub fn ids(ids: &[i64]) -> Vec<i64> {
    let mut list = ids.to_vec();
    list.resize(length_for(ids.len()), NO_ID);
    list
}

/// A statement's text for each prepared length, built once: the texts of the hot path (claims,
/// completions) run to tens of kilobytes, which would otherwise be formatted anew per batch.
pub struct Texts(Vec<String>);

impl Texts {
    /// `build(n)` for every length in [`LENGTHS`] up to `most`.
    pub fn new(most: usize, build: impl Fn(usize) -> String) -> Self {
        Texts(
            LENGTHS
                .into_iter()
                .take_while(|&n| n <= most)
                .map(build)
                .collect(),
        )
    }

    /// The text for a list padded to `length` (one of [`LENGTHS`], at most the `most` given).
    pub fn get(&self, length: usize) -> &str {
        let index = LENGTHS
            .iter()
            .position(|&l| l == length)
            .expect("lists are padded to a prepared length");
        &self.0[index]
    }
}

/// `?, ?, …, ?`: `n` placeholders.
pub fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_lists_are_padded_with_an_id_no_row_has() {
        let list = ids(&[4, 9, 2]);
        assert_eq!(list.len(), 16);
        assert_eq!(&list[..3], &[4, 9, 2]);
        assert!(list[3..].iter().all(|&id| id == NO_ID));
    }

    #[test]
    fn lists_take_the_nearest_prepared_length() {
        assert_eq!(length_for(0), 16);
        assert_eq!(length_for(16), 16);
        assert_eq!(length_for(17), 32);
        assert_eq!(length_for(129), 256);
        assert_eq!(length_for(LONGEST), LONGEST);
        let full: Vec<i64> = (1..=64).collect();
        assert_eq!(ids(&full), full);
    }

    #[test]
    fn texts_are_built_for_every_length() {
        let texts = Texts::new(LONGEST, |n| format!("IN ({})", placeholders(n)));
        assert_eq!(texts.get(16).matches('?').count(), 16);
        assert_eq!(texts.get(LONGEST).matches('?').count(), LONGEST);
        assert_eq!(texts.get(length_for(20)).matches('?').count(), 32);
    }

    #[test]
    fn placeholders_are_comma_separated() {
        assert_eq!(placeholders(3), "?, ?, ?");
        assert_eq!(placeholders(1), "?");
    }
}
