"""The development broker: a real Apache Kafka (KRaft) run as background JVMs from Kafka's
own jars, one plaintext node by default, or a cluster of several nodes secured with SASL_SSL
(SCRAM users) or mutual TLS. Used by the CLI (`globalstore kafka ...`), the tests, the
benchmarks and the demo; not part of the store.

    broker.py    LocalKafka: start, stop and inspect the nodes, one node at a time too
    settings.py  each node's server.properties and log4j2 config, its ports, a cluster id
    security.py  plaintext, SASL_SSL or mTLS: the files, the users, broker and client settings
    certs.py     the CA and certificates, made with `openssl`
    state.py     what the data dir records: the running JVMs (broker.json), the shape
    paths.py     where a node keeps its files, and reading its logs back
    jvm.py       launch a node's JVM, format its storage, signal it, wait for its exit
    metadata.py  asking the nodes: does one answer yet, who leads a partition
    ports.py     free and taken loopback ports, and a lost race for one
    jars.py      resolve Kafka's jars from Maven Central once, and cache them
    java.py      find a Java 17+ runtime
    errors.py    LocalKafkaError, the root of everything above can raise
"""

from globalstore.localkafka.broker import (
    ANY_PORT,
    DEFAULT_HEAP,
    DEFAULT_KAFKA_VERSION,
    DEFAULT_NODE_HEAP,
    DEFAULT_PORT,
    LocalKafka,
)
from globalstore.localkafka.errors import (
    BrokerExitedError,
    JarResolutionError,
    JavaError,
    LocalKafkaError,
    PortInUseError,
)
from globalstore.localkafka.paths import default_data_dir
from globalstore.localkafka.ports import free_port
from globalstore.localkafka.security import USERS, Security
from globalstore.localkafka.state import BrokerStatus, ClusterShape, recorded_shape

__all__ = [
    "ANY_PORT",
    "DEFAULT_HEAP",
    "DEFAULT_KAFKA_VERSION",
    "DEFAULT_NODE_HEAP",
    "DEFAULT_PORT",
    "USERS",
    "BrokerExitedError",
    "BrokerStatus",
    "ClusterShape",
    "JarResolutionError",
    "JavaError",
    "LocalKafka",
    "LocalKafkaError",
    "PortInUseError",
    "Security",
    "default_data_dir",
    "free_port",
    "recorded_shape",
]
