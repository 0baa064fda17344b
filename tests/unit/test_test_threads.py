"""The suite's thread rule (tests/conftest.py) reaches a module's fixtures, not only its tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def threads_when_built():
    return torch.get_num_threads()


def test_an_earlier_test_leaves_another_thread_count():
    torch.set_num_threads(2)  # as a slow test before this module may (it runs at the machine's share)


def test_a_module_fixture_is_built_at_one_thread(threads_when_built):
    assert threads_when_built == 1
