//! Who is calling, and may they scale the workload: TokenReview then
//! SubjectAccessReview. The token is only ever sent to the API server; it is
//! never logged or echoed.

use std::fmt;

use axum::http::HeaderMap;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::api::PrescaleRequest;
use super::error::HookError;

/// A bearer token whose `Debug` and `Display` never show it.
pub(crate) struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// The bearer token of the `Authorization` header (pure).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<Token, HookError> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .ok_or_else(|| {
            HookError::Unauthenticated(
                "no Authorization header; send `Authorization: Bearer <ServiceAccount token>`"
                    .into(),
            )
        })?
        .to_str()
        .map_err(|_| HookError::Unauthenticated("Authorization header is not ASCII".into()))?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(HookError::Unauthenticated(
            "Authorization header is not `Bearer <token>`".into(),
        ));
    }
    Ok(Token(token.to_string()))
}

/// Asks the API server who the token belongs to (TokenReview, with the
/// hook's audiences when configured).
pub(crate) async fn authenticate(
    client: &Client,
    token: Token,
    audiences: &[String],
) -> Result<UserInfo, HookError> {
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.0,
            audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
        },
        ..Default::default()
    };
    let answer = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| HookError::Internal(format!("TokenReview failed: {}", api_error(&e))))?;
    let status = answer.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        let why = status
            .error
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| "token not accepted".into());
        return Err(HookError::Unauthenticated(why));
    }
    if !audiences.is_empty() {
        let granted = status.audiences.unwrap_or_default();
        if !granted.iter().any(|a| audiences.contains(a)) {
            return Err(HookError::Unauthenticated(format!(
                "token is not valid for the hook's audience ({})",
                audiences.join(", ")
            )));
        }
    }
    status
        .user
        .filter(|u| u.username.as_deref().is_some_and(|n| !n.is_empty()))
        .ok_or_else(|| HookError::Unauthenticated("token review named no user".into()))
}

/// The SubjectAccessReview spec: may `user` update the workload's scale (pure).
pub(crate) fn access_review(user: &UserInfo, req: &PrescaleRequest) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(req.namespace.clone()),
                verb: Some("update".into()),
                group: Some("apps".into()),
                resource: Some(req.workload.kind.resource().into()),
                subresource: Some("scale".into()),
                name: Some(req.workload.name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Checks that `user` may update the workload's scale subresource.
pub(crate) async fn authorize(
    client: &Client,
    user: &UserInfo,
    req: &PrescaleRequest,
) -> Result<(), HookError> {
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &access_review(user, req))
        .await
        .map_err(|e| {
            HookError::Internal(format!("SubjectAccessReview failed: {}", api_error(&e)))
        })?;
    let status = answer.status.unwrap_or_default();
    if status.allowed && status.denied != Some(true) {
        return Ok(());
    }
    let user = user.username.as_deref().unwrap_or("?");
    let mut msg = format!(
        "{user} may not update {}/scale {:?} in namespace {:?}",
        req.workload.kind.resource(),
        req.workload.name,
        req.namespace
    );
    if let Some(reason) = status.reason.filter(|r| !r.is_empty()) {
        msg.push_str(&format!(" ({reason})"));
    }
    Err(HookError::Forbidden(msg))
}

/// An API error without request details.
pub(crate) fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::api::{Workload, WorkloadKind};
    use axum::http::HeaderValue;

    #[test]
    fn bearer_tokens_are_extracted_and_never_printed() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h).unwrap_err().status(), 401);
        h.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&h).unwrap_err().status(), 401);
        h.insert("authorization", HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&h).unwrap_err().status(), 401);
        h.insert("authorization", HeaderValue::from_static("bearer s3cret"));
        let t = bearer_token(&h).unwrap();
        assert_eq!(t.0, "s3cret");
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn the_access_review_asks_for_update_on_the_scale_subresource() {
        let user = UserInfo {
            username: Some("system:serviceaccount:ops:autoscaler".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            ..Default::default()
        };
        let req = PrescaleRequest {
            namespace: "shop".into(),
            workload: Workload {
                kind: WorkloadKind::ReplicaSet,
                name: "web-1".into(),
            },
            replicas: 1,
            scale: false,
            timeout: std::time::Duration::from_secs(5),
        };
        let sar = access_review(&user, &req);
        assert_eq!(sar.spec.user, user.username);
        assert_eq!(sar.spec.groups, user.groups);
        let ra = sar.spec.resource_attributes.unwrap();
        assert_eq!(
            (
                ra.verb.as_deref(),
                ra.group.as_deref(),
                ra.resource.as_deref(),
                ra.subresource.as_deref(),
                ra.namespace.as_deref(),
                ra.name.as_deref()
            ),
            (
                Some("update"),
                Some("apps"),
                Some("replicasets"),
                Some("scale"),
                Some("shop"),
                Some("web-1")
            )
        );
    }
}
