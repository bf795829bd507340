package iceberg

import (
	"github.com/redpanda-data/benthos/v4/public/service"
)

// sigv4Spec is `catalog.auth.aws_sigv4`: Redpanda Connect's fields (its AWS session's:
// region, endpoint, tcp, credentials, plus service), each acting as there. libfloe reads
// them (src/config/, src/catalog/aws_chain/).
func sigv4Spec() *service.ConfigField {
	return service.NewObjectField("aws_sigv4",
		service.NewStringField("region").Optional().Description("Region in the signature's scope; `AWS_REGION` when absent."),
		service.NewStringField("endpoint").Optional().Description("The AWS API endpoint of the calls floe makes for credentials: STS, for `credentials.role` (AssumeRole) and for web identity (AssumeRoleWithWebIdentity), e.g. a VPC endpoint or LocalStack. Absent: `AWS_ENDPOINT_URL_STS`, else `https://sts.<region>.amazonaws.com`. As in Redpanda Connect (the AWS SDK's base endpoint), catalog requests still go to `catalog.url`, signed for its host."),
		tcpSpec("catalog.auth.aws_sigv4.tcp").Description("TCP settings of the connections floe makes for credentials (STS, the container credentials endpoint, instance metadata), as Redpanda Connect applies them to its AWS session's HTTP client; catalog requests are not affected."),
		service.NewObjectField("credentials",
			service.NewStringField("profile").Optional().Description("A profile of the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, `~/.aws/credentials`) or config file with static keys, in place of `AWS_PROFILE`. Not with `id`."),
			service.NewStringField("id").Optional().Description("The AWS access key id."),
			service.NewStringField("secret").Secret().Optional().Description("The AWS secret access key."),
			service.NewStringField("token").Secret().Optional().Description("The AWS session token of temporary credentials."),
			service.NewBoolField("from_ec2_role").Optional().Description("Sign with the EC2 instance's role (instance metadata, IMDSv2; `AWS_EC2_METADATA_SERVICE_ENDPOINT` overrides its address), its credentials fetched again before they expire. Replaces every other source, so not with `profile`, `id` or `role`."),
			service.NewStringField("role").Optional().Description("A role ARN to assume through STS (AssumeRole, at `endpoint` when set) with the credentials above (a profile, the keys given, else the default chain); its temporary credentials are renewed before they expire. The session is named `AWS_ROLE_SESSION_NAME`, else `floe-catalog`."),
			service.NewStringField("role_external_id").Optional().Description("The external id the role's trust policy asks for; needs `role`."),
		).Optional().Description("Absent: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`, then the shared credentials file (`AWS_PROFILE`), web identity, the container credentials endpoint and the instance's role."),
		service.NewStringField("service").Optional().Description(defaultNote("Service in the signature's scope: `glue` for Glue's Iceberg endpoint, `s3tables` for S3 Tables.", "catalog.auth.aws_sigv4.service")),
	).Optional().Description("AWS SigV4-signed catalog calls (AWS Glue, S3 Tables).")
}

// tcpSpec is Benthos' `tcp` section (netutil.DialerConfigSpec, which Redpanda Connect's
// AWS session uses) with its defaults in the descriptions, from libfloe: declared
// defaults would make the host fill in the optional sections around it.
func tcpSpec(path string) *service.ConfigField {
	return service.NewObjectField("tcp",
		service.NewDurationField("connect_timeout").Optional().Description(defaultNote("Maximum amount of time a dial will wait for a connect to complete. Zero: floe's default, 2 s (the instance metadata address must fail fast off EC2).", path+".connect_timeout")),
		service.NewObjectField("keep_alive",
			service.NewDurationField("idle").Optional().Description(defaultNote("Duration the connection must be idle before sending the first keep-alive probe. Zero defaults to 15s. Negative values disable keep-alive probes.", path+".keep_alive.idle")),
			service.NewDurationField("interval").Optional().Description(defaultNote("Duration between keep-alive probes. Zero defaults to 15s.", path+".keep_alive.interval")),
			service.NewIntField("count").Optional().Description(defaultNote("Maximum unanswered keep-alive probes before dropping the connection. Zero defaults to 9.", path+".keep_alive.count")),
		).Optional().Description("TCP keep-alive probe configuration."),
		service.NewDurationField("tcp_user_timeout").Optional().Description(defaultNote("Maximum time to wait for acknowledgment of transmitted data before killing the connection. Linux-only, ignored on other platforms. When enabled, keep_alive.idle must be greater than this value per RFC 5482. Zero disables.", path+".tcp_user_timeout")),
	).Optional().Advanced()
}
