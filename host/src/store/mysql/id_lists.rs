//! Id lists bound one placeholder per id, in a few fixed sizes.
//!
//! A statement that changes a known set of rows by primary key (`WHERE id IN (?, …)`) is the
//! cheapest form on MySQL and MariaDB: a range read of the primary key, each row changed in
//! place. Joining the table to a `JSON_TABLE` instead makes the server stage every changed row
//! in an internal temporary table first (a multi-table `UPDATE` changes only its first table on
//! the fly), on disk as soon as one assigned column is a TEXT. But one placeholder per id would
//! make a statement text per list length, and every connection would prepare (and the server
//! keep) hundreds of them. So a list is padded up to the next of [`SIZES`] by repeating its
//! last id, which changes nothing (`IN` matches a row once however often it is named), and
//! longer lists are cut: each operation prepares at most `SIZES.len()` statement texts.

use crate::task::TaskId;

/// The list lengths statements are prepared for.
pub const SIZES: [usize; 7] = [16, 32, 64, 128, 256, 512, 1024];

/// `ids` cut into lists of at most the largest size, each padded to the nearest size.
pub fn padded(ids: &[TaskId]) -> Vec<Vec<TaskId>> {
    let largest = SIZES[SIZES.len() - 1];
    ids.chunks(largest)
        .map(|chunk| {
            let size = SIZES
                .into_iter()
                .find(|&size| size >= chunk.len())
                .unwrap_or(largest);
            let mut list = chunk.to_vec();
            let last = *chunk.last().expect("chunks are never empty");
            list.resize(size, last);
            list
        })
        .collect()
}

/// `?, ?, …, ?`: `n` placeholders.
pub fn placeholders(n: usize) -> String {
    vec!["?"; n].join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_lists_are_padded_with_their_last_id() {
        let lists = padded(&[4, 9, 2]);
        assert_eq!(lists.len(), 1);
        assert_eq!(lists[0].len(), 16);
        assert_eq!(&lists[0][..3], &[4, 9, 2]);
        assert!(lists[0][3..].iter().all(|&id| id == 2));
    }

    #[test]
    fn a_list_of_a_prepared_size_is_kept_as_it_is() {
        let ids: Vec<TaskId> = (1..=64).collect();
        assert_eq!(padded(&ids), vec![ids.clone()]);
    }

    #[test]
    fn long_lists_are_cut_and_every_id_stays_in_order() {
        let ids: Vec<TaskId> = (1..=2100).collect();
        let lists = padded(&ids);
        let lengths: Vec<usize> = lists.iter().map(Vec::len).collect();
        assert_eq!(lengths, vec![1024, 1024, 64]);
        let mut seen: Vec<TaskId> = lists.concat();
        seen.dedup();
        assert_eq!(seen, ids);
    }

    #[test]
    fn nothing_in_nothing_out() {
        assert!(padded(&[]).is_empty());
        assert_eq!(placeholders(3), "?, ?, ?");
    }
}
