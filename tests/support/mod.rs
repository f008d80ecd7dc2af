//! The in-process operator harness (`mod support;` in a test file); it needs
//! the product, so it lives here rather than in the test kit (`testkit/`),
//! which holds the fake API server, `eventually` and the other shared helpers.
// Each test binary uses only some of it.
#![allow(dead_code)]

pub mod lag;
pub mod operator;
