"""What a searched study's searches decided: the tasks whose every search has ended."""

import pandas as pd

from vitplast.experiments import decide


def test_complete_tasks_are_those_whose_every_search_ended():
    state = pd.DataFrame(dict(task=["a", "a", "b", "b"], next=[[], [], [], [0.3]]))
    assert decide.complete_tasks(state) == ["a"]
