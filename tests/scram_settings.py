"""Client settings of a SCRAM user and the broker's refusal of them, for tests of how
errors read (no broker needed): the password must never show in what a user sees."""

SECRET = "pw-0f9e"
SETTINGS = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": SECRET,
}
AUTH_MESSAGE = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism SCRAM-SHA-512"
)
