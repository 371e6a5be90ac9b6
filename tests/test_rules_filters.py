"""Work run on every candidate and filtered afterwards by a threshold its input already held
(`diagnose/filters.py`): found from the source at a line calling the loop, on both sides, and
in a real run of a detector's post-processing."""

from conftest import SCRIPTS, planted_line, read_report, torchneck
from rule_cases import fires

from torchneck.diagnose.filters import filtered_after


def test_a_threshold_on_the_calls_input_applied_to_its_result(tmp_path):
    src = tmp_path / "post.py"
    src.write_text("def post(boxes, scores, labels, thr):\n"
                   "    cand = torch.arange(len(scores))\n"                           # 2
                   "    keep = cand[nms(boxes[cand], scores[cand], 0.5)]\n"           # 3: fires
                   "    keep = keep[scores[keep] > thr][:100]\n"                      # 4
                   "    return keep\n"
                   "def masked(boxes, scores, thr):\n"
                   "    out = nms(boxes[idx], scores[idx], 0.5)\n"                   # 7: fires, via a mask
                   "    ok = scores[out] > thr\n"
                   "    return out[ok]\n"
                   "def own_output(boxes, scores, thr):\n"
                   "    kept, new_scores = refine(boxes[idx], scores[idx])\n"        # 11: the filter reads the result
                   "    return kept[new_scores > thr]\n"
                   "def no_filter(boxes, scores):\n"
                   "    keep = nms(boxes[idx], scores[idx], 0.5)\n"                  # 14: kept whole
                   "    return keep[:100]\n"
                   "def two_sets(a, b, i, j, thr):\n"
                   "    r = f(a[i], b[j])\n"                                          # 17: not one candidate set
                   "    return r[b[r] > thr]\n")
    found = filtered_after(str(src), 3)
    assert (found.call_line, found.filter_line, found.candidates_line) == (3, 4, 2)
    assert found.condition == "scores[keep] > thr"
    masked = filtered_after(str(src), 7)
    assert (masked.filter_line, masked.candidates_line) == (9, None) and masked.condition == "scores[out] > thr"
    assert [filtered_after(str(src), n) for n in (11, 14, 17, 4, 2)] == [None] * 5


@fires("python_hotspot")
def test_a_python_nms_over_every_anchor_is_told_to_filter_first(run_dir):
    """Greedy NMS in Python over all 1,500 anchors, the score threshold applied to what it kept:
    the loop's finding leads with the line choosing the candidates, where the threshold goes."""
    script = SCRIPTS / "nms_after_threshold.py"
    r = torchneck("run", "--quiet", "--out", str(run_dir), str(script))
    assert r.returncode == 0, r.stderr[-2000:]
    top = read_report(run_dir)["findings"][0]
    assert top["kind"] in ("python_hotspot", "dispatch_overhead"), top["title"]
    assert top["where"][0]["line"] == planted_line(script)
    assert top["evidence"]["filtered_after"]["condition"] == "scores[keep] > score_thr"
    assert "Filter before the work" in top["fix"] and "batched_nms" in top["fix"]
