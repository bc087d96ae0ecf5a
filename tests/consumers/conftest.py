"""Consumer tests run real broker processes; the leftover checks of tests/broker apply here too."""
from tests.broker.conftest import (_record_client_keys, broker_name, config, nothing_left_behind,  # noqa: F401
                                   store_dir)
