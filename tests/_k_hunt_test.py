import sys
sys.path.insert(0, "tests")
from hypothesis import settings, HealthCheck
from hypothesis.stateful import run_state_machine_as_test
import test_supervision_stateful as m
from test_supervision_stateful import make_config  # noqa
from conftest import tiny_gguf  # noqa

def test_hunt(make_config):
    s = settings(max_examples=600, stateful_step_count=50, deadline=None, derandomize=False, database=None, suppress_health_check=list(HealthCheck))
    run_state_machine_as_test(lambda: m.OneInstance(make_config()), settings=s)
