"""MEM403 figure-not-closed-in-loop: pyplot figures made per iteration of a loop that repeats with the run."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM403"
LOOP = "from torch.utils.data import DataLoader\nfor batch in DataLoader(data):\n"

REPORTED = {
    "from_import": "from matplotlib.pyplot import subplots\n" + LOOP + "    fig, ax = subplots()  # expect: MEM403\n    fig.savefig('a.png')\n",
    "module_alias": "import matplotlib.pyplot as mp\n" + LOOP + "    mp.figure(figsize=(3, 3))  # expect: MEM403\n    mp.savefig('a.png')\n",
    "closes_another_figure": (
        "import matplotlib.pyplot as plt\n" + LOOP + "    fig = plt.figure()  # expect: MEM403\n    other = plt.figure(1)\n    plt.close(other)\n"
    ),
    "kept_in_a_list": "import matplotlib.pyplot as plt\nfigs = []\n" + LOOP + "    fig = plt.figure()  # expect: MEM403\n    figs.append(fig)\n",
    "mlflow_does_not_close": "import matplotlib.pyplot as plt\nimport mlflow\n" + LOOP + "    fig, ax = plt.subplots()  # expect: MEM403\n    mlflow.log_figure(fig, 'f.png')\n",
    "closed_after_the_loop": "import matplotlib.pyplot as plt\n" + LOOP + "    fig = plt.figure()  # expect: MEM403\nplt.close('all')\n",
}

SILENT = {
    "close_all": "import matplotlib.pyplot as plt\n" + LOOP + "    fig = plt.figure()\n    fig.savefig('a.png')\n    plt.close('all')\n",
    "close_current": "import matplotlib.pyplot as plt\n" + LOOP + "    plt.figure()\n    plt.savefig('a.png')\n    plt.close()\n",
    "clf": "import matplotlib.pyplot as plt\n" + LOOP + "    fig = plt.figure()\n    fig.savefig('a.png')\n    fig.clf()\n",
    "add_figure_positional_true": (
        "import matplotlib.pyplot as plt\n" + LOOP + "    fig = plt.figure()\n    writer.add_figure('t', fig, 0, True)\n"
    ),
    "numbered": "import matplotlib.pyplot as plt\n" + LOOP + "    fig = plt.figure(num=3)\n    fig.savefig('a.png')\n",
    "handed_to_unknown_logger": "import matplotlib.pyplot as plt\nfrom .logging import log_figure\n" + LOOP + "    fig = plt.figure()\n    log_figure(fig)\n",
    "helper_that_closes": (
        "import matplotlib.pyplot as plt\ndef done(f):\n    f.savefig('a.png')\n    plt.close(f)\n" + LOOP + "    fig = plt.figure()\n    done(fig)\n"
    ),
    "no_pyplot": "import matplotlib\n" + LOOP + "    fig = matplotlib.figure.Figure()\n",
    "other_library_figure": "import plotly.graph_objects as go\n" + LOOP + "    fig = go.Figure()\n",
    "once_before_the_loop": "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n" + LOOP + "    ax.plot(batch)\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
