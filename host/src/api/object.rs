//! Request bodies as JSON objects only.
//!
//! serde's derived `Deserialize` for a struct accepts two shapes: an object of named fields, and
//! an array of the fields in declaration order (`["noop"]` is then a task of type `noop`). The
//! API's description says object, and a client sending an array has made a mistake the host
//! should name rather than guess at, so [`Object`] lets a struct be read from an object and
//! nothing else. It wraps the deserializer, not the type: the structs keep their derived
//! impls and their OpenAPI schemas.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use std::fmt;

/// A `T` read from a JSON object; an array (or anything else) is an "invalid type" error that
/// says a JSON object was expected.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(MapsOnly(deserializer)).map(Object)
    }
}

/// For `#[serde(deserialize_with = "object::list")]`: a list whose items are each an [`Object`].
pub fn list<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let items = Vec::<Object<T>>::deserialize(deserializer)?;
    Ok(items.into_iter().map(|Object(item)| item).collect())
}

/// A deserializer that reads a struct the way it reads a map, which for JSON means from an
/// object only. It is meant for structs: any other `T` is read by `deserialize_any`, by the
/// shape of the value itself, which suits numbers, strings and options but not enums.
struct MapsOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapsOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(ObjectVisitor(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// Passes a map on to the struct's own visitor and names "a JSON object" in the error for
/// anything else.
struct ObjectVisitor<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for ObjectVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Task {
        task_type: String,
        #[serde(default)]
        priority: i32,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Batch {
        #[serde(deserialize_with = "list")]
        tasks: Vec<Task>,
    }

    fn read<T: for<'de> Deserialize<'de>>(json: &str) -> Result<T, String> {
        serde_json::from_str::<Object<T>>(json)
            .map(|Object(value)| value)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_object_reads_as_the_derived_struct_would() {
        let batch: Batch = read(r#"{"tasks": [{"task_type": "noop", "priority": 3}]}"#).unwrap();
        assert_eq!(
            batch.tasks,
            vec![Task {
                task_type: "noop".into(),
                priority: 3
            }]
        );
        let task: Task = read(r#"{"task_type": "noop"}"#).unwrap();
        assert_eq!(task.priority, 0);
    }

    #[test]
    fn the_derived_struct_alone_takes_an_array_of_its_fields() {
        // What this module is for: without it, `[[["noop"]]]` is a batch of one task.
        #[derive(Deserialize)]
        struct PlainBatch {
            tasks: Vec<Task>,
        }
        let batch: PlainBatch = serde_json::from_str(r#"[[["noop", 1]]]"#).unwrap();
        assert_eq!(batch.tasks[0].task_type, "noop");
        assert_eq!(batch.tasks[0].priority, 1);
    }

    #[test]
    fn arrays_are_refused_at_the_top_and_in_lists() {
        for json in ["[[]]", "[]", r#"[["noop"]]"#] {
            let error = read::<Batch>(json).unwrap_err();
            assert!(
                error.contains("invalid type: sequence, expected a JSON object"),
                "{json}: {error}"
            );
        }
        let error = read::<Batch>(r#"{"tasks": [["noop", 1]]}"#).unwrap_err();
        assert!(error.contains("expected a JSON object"), "{error}");
        let error = read::<Task>(r#""noop""#).unwrap_err();
        assert!(error.contains("expected a JSON object"), "{error}");
    }

    #[test]
    fn field_errors_still_name_the_field() {
        let error = read::<Task>(r#"{"task_type": "noop", "colour": 1}"#).unwrap_err();
        assert!(error.contains("unknown field `colour`"), "{error}");
        let error = read::<Task>(r#"{"priority": 1}"#).unwrap_err();
        assert!(error.contains("missing field `task_type`"), "{error}");
    }
}
