use super::*;

#[test]
fn the_environment_names_the_provider_in_the_chains_order() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let web = Provider::from_env(
        env(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
            ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"),
        ]),
        &regional_sts("eu-west-1"),
    );
    assert!(
        matches!(web, Some(Provider::WebIdentity { ref sts_url, .. }) if sts_url == "https://sts.eu-west-1.amazonaws.com")
    );
    let ecs = Provider::from_env(
        env(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/c")]),
        "sts",
    );
    assert!(
        matches!(ecs, Some(Provider::Container { ref url, authorization: None }) if url == "http://169.254.170.2/v2/c")
    );
    let pod = Provider::from_env(
        env(&[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1/credentials",
            ),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/token"),
        ]),
        "sts",
    );
    assert!(matches!(
        pod,
        Some(Provider::Container {
            authorization: Some(ContainerAuth::TokenFile(_)),
            ..
        })
    ));
    let imds = Provider::from_env(env(&[]), "sts");
    assert!(
        matches!(imds, Some(Provider::Instance { ref endpoint }) if endpoint == "http://169.254.169.254")
    );
    assert!(Provider::from_env(env(&[("AWS_EC2_METADATA_DISABLED", "true")]), "sts").is_none());
    assert_eq!(
        regional_sts("cn-north-1"),
        "https://sts.cn-north-1.amazonaws.com.cn"
    );
    // A plain-http full URI elsewhere never gets the token.
    assert!(container_uri_allowed("http://127.0.0.1:8080/creds"));
    assert!(container_uri_allowed(
        "http://169.254.170.23/v1/credentials"
    ));
    assert!(container_uri_allowed("https://creds.example.com/x"));
    assert!(!container_uri_allowed("http://creds.example.com/x"));
}

#[test]
fn answers_are_parsed_with_their_expiry() {
    let (c, at) = json_credentials(
        r#"{"Code": "Success", "AccessKeyId": "ASIA1", "SecretAccessKey": "s", "Token": "t", "Expiration": "2026-12-01T21:00:00Z"}"#,
    )
    .unwrap();
    assert_eq!((c.id.as_str(), c.token.as_deref()), ("ASIA1", Some("t")));
    assert_eq!(at, parse_time("2026-12-01T21:00:00+00:00"));
    let xml = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
               <AccessKeyId>ASIA2</AccessKeyId><SecretAccessKey>s2</SecretAccessKey>\
               <SessionToken>t2</SessionToken><Expiration>2026-12-01T22:00:00Z</Expiration>\
               </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
    let (c, at) = sts_credentials(xml).unwrap();
    assert_eq!((c.id.as_str(), c.secret.as_str()), ("ASIA2", "s2"));
    assert!(at.is_some());
    assert!(json_credentials(r#"{"Code": "Failure"}"#).is_err());
}

#[test]
fn tcp_settings_take_benthos_defaults_for_zero_values() {
    let parse = |json: &str| serde_json::from_str::<TcpConfig>(json).unwrap();
    assert_eq!(
        tcp_settings(None),
        TcpSettings {
            connect_timeout: Duration::from_secs(2),
            keep_alive: None,
            user_timeout: None
        }
    );
    let rpcn_defaults = parse(
        r#"{"connect_timeout": "0s", "keep_alive": {"idle": "15s", "interval": "15s", "count": 9}, "tcp_user_timeout": "0s"}"#,
    );
    let fifteen = Duration::from_secs(15);
    assert_eq!(
        tcp_settings(Some(&rpcn_defaults)),
        TcpSettings {
            connect_timeout: Duration::from_secs(2),
            keep_alive: Some((fifteen, fifteen, 9)),
            user_timeout: None
        }
    );
    let set = parse(
        r#"{"connect_timeout": "300ms", "keep_alive": {"idle": "0s", "interval": "5s", "count": 0}, "tcp_user_timeout": "10s"}"#,
    );
    assert_eq!(
        tcp_settings(Some(&set)),
        TcpSettings {
            connect_timeout: Duration::from_millis(300),
            keep_alive: Some((fifteen, Duration::from_secs(5), 9)),
            user_timeout: Some(Duration::from_secs(10))
        }
    );
    let off = parse(r#"{"keep_alive": {"idle": "-1s"}}"#);
    assert_eq!(tcp_settings(Some(&off)).keep_alive, None);
    assert!(credentials_client(Some(&set)).is_ok());
}

#[test]
fn temporary_credentials_are_fetched_again_well_before_they_expire() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let hour = Duration::from_secs(3600);
    assert_eq!(refresh_at(Some(now + hour), now), now + hour - MAX_MARGIN);
    let short = Duration::from_secs(10);
    assert_eq!(refresh_at(Some(now + short), now), now + short / 2);
    assert_eq!(refresh_at(Some(now), now + short), now);
    assert_eq!(refresh_at(None, now), now + hour);
}
