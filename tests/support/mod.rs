//! Helpers shared by integration tests (`mod support;` in a test file).
// Each test binary uses only some helpers.
#![allow(dead_code)]

pub mod operator;
pub mod prometheus;
