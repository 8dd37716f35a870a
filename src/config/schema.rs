//! The JSON Schema of jobs.toml (`slotcron schema`), generated from the raw types the loader
//! reads the file into, so that an editor (Taplo, Even Better TOML) refuses what the loader
//! refuses and completes every key. `schema/jobs.schema.json` is this text, committed; a test
//! fails when the two drift apart.

use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::raw::RawFile;

/// The schema as pretty JSON, ending with a newline.
pub fn json_schema() -> String {
    // Draft 7: the newest draft Taplo's validator knows fully.
    let generator = SchemaSettings::draft07().into_generator();
    let mut schema = generator.into_root_schema_for::<RawFile>().to_value();
    drop_null(&mut schema);
    if let Some(definitions) = schema.get_mut("definitions").and_then(Value::as_object_mut) {
        // A type's doc comment is for this crate's readers (why it is kept apart, which checker
        // reads it); the editor shows its fields' and words' comments instead.
        for definition in definitions.values_mut().filter_map(Value::as_object_mut) {
            definition.remove("description");
        }
    }
    words_as_enum(&mut schema);
    if let Some(definitions) = schema.get_mut("definitions") {
        allow_file_forms(definitions);
    }
    let mut text = serde_json::to_string_pretty(&schema).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// Takes `null` out of every schema below `schema`: TOML has no null (an optional key is one
/// left out), so `Option<T>`'s `["T", "null"]` is `T`, its `anyOf: [T, null]` is `T`, and a
/// `default` of `null` says nothing.
fn drop_null(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Array(types)) = object.get_mut("type") {
                types.retain(|t| t != "null");
                if let [only] = types.as_slice() {
                    let only = only.clone();
                    object.insert("type".to_owned(), only);
                }
            }
            if object.get("default") == Some(&Value::Null) {
                object.remove("default");
            }
            if let Some(Value::Array(choices)) = object.get_mut("anyOf") {
                choices.retain(|c| c != &json!({ "type": "null" }));
                if let [only] = choices.as_slice() {
                    let only = only.clone();
                    object.remove("anyOf");
                    object.insert("allOf".to_owned(), Value::Array(vec![only]));
                }
            }
            object.values_mut().for_each(drop_null);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null),
        _ => {}
    }
}

/// A `oneOf` of constants (a unit enum whose variants have doc comments, such as `overlap`)
/// as one `enum`, each word's comment kept in its description: a validator then reports a bad
/// word against the list of good ones, as `check` does.
fn words_as_enum(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            let words: Option<Vec<(Value, String)>> = match object.get("oneOf") {
                Some(Value::Array(choices)) => choices
                    .iter()
                    .map(|c| {
                        let word = c.get("const")?.clone();
                        let said = c.get("description").and_then(Value::as_str).unwrap_or("");
                        Some((word.clone(), format!("{word}: {said}")))
                    })
                    .collect(),
                _ => None,
            };
            if let Some(words) = words {
                object.remove("oneOf");
                let (words, said): (Vec<Value>, Vec<String>) = words.into_iter().unzip();
                let description = said.join("\n");
                object.insert("type".to_owned(), json!("string"));
                object.insert("enum".to_owned(), Value::Array(words));
                object.insert("description".to_owned(), Value::String(description));
            }
            object.values_mut().for_each(words_as_enum);
        }
        Value::Array(items) => items.iter_mut().for_each(words_as_enum),
        _ => {}
    }
}

/// Every string key of an action table may be given as `NAME_file` instead (the loader reads
/// the file into `NAME`, see `actions::read_file_fields`): each such key gets its `_file` form,
/// and a required one is satisfied by either.
fn allow_file_forms(definitions: &mut Value) {
    let Some(action) = definitions.get_mut("RawAction") else {
        return;
    };
    for variant in action["oneOf"].as_array_mut().into_iter().flatten() {
        add_file_forms(variant);
    }
    by_type(action);
}

/// The action's `oneOf` as one `if type is X then X's table` per type: a validator then
/// reports the key at fault inside the chosen type (an unknown key, a missing `msgtype`), as
/// `check` does, instead of "not valid under any of the schemas"; and an unknown `type` is
/// reported against the list of types.
fn by_type(action: &mut Value) {
    let Some(Value::Array(variants)) = action.as_object_mut().and_then(|a| a.remove("oneOf"))
    else {
        return;
    };
    let types: Vec<Value> = variants
        .iter()
        .map(|v| v["properties"]["type"]["const"].clone())
        .collect();
    let cases: Vec<Value> = variants
        .into_iter()
        .zip(&types)
        .map(|(then, name)| {
            json!({ "if": { "properties": { "type": { "const": name } } }, "then": then })
        })
        .collect();
    action["type"] = json!("object");
    action["required"] = json!(["type"]);
    action["properties"] =
        json!({ "type": { "enum": types, "description": "What the action does." } });
    action["allOf"] = Value::Array(cases);
}

/// [`allow_file_forms`] for one action type's object schema.
fn add_file_forms(variant: &mut Value) {
    let Some(properties) = variant.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    let strings: Vec<String> = properties
        .iter()
        .filter(|(name, schema)| *name != "type" && is_string(schema))
        .map(|(name, _)| name.clone())
        .collect();
    for name in &strings {
        let described = format!("A file whose contents are `{name}` (relative to jobs.toml).");
        properties.insert(
            format!("{name}_file"),
            json!({ "type": "string", "description": described }),
        );
    }
    let Some(required) = variant.get_mut("required").and_then(Value::as_array_mut) else {
        return;
    };
    let either: Vec<String> = strings
        .into_iter()
        .filter(|name| required.iter().any(|r| r == name.as_str()))
        .collect();
    required.retain(|r| !either.iter().any(|name| r == name.as_str()));
    let alternatives: Vec<Value> = either
        .iter()
        .map(|name| json!({ "anyOf": [{ "required": [name] }, { "required": [format!("{name}_file")] }] }))
        .collect();
    if let (false, Some(object)) = (alternatives.is_empty(), variant.as_object_mut()) {
        object.insert("allOf".to_owned(), Value::Array(alternatives));
    }
}

/// Whether `schema` takes a string (perhaps optional: `["string", "null"]`).
fn is_string(schema: &Value) -> bool {
    match &schema["type"] {
        Value::String(t) => t == "string",
        Value::Array(types) => types.iter().any(|t| t == "string"),
        _ => false,
    }
}
