//! The in-process operator harness and the request-sequence verifier (`mod
//! support;` in a test file); they need the product, so they live here
//! rather than in the test kit (`testkit/`), which holds the fake API server,
//! `eventually` and the other shared helpers.
// Each test binary uses only some of it.
#![allow(dead_code)]

pub mod controller;
pub mod lag;
pub mod operator;
pub mod verifier;
