#!/usr/bin/env python3
"""Self-test of overlap.py (standard library only): the check must fail when a shared paragraph
(or a shared question with its answer) is planted into a training document, and pass otherwise.

Run: python3 -m unittest training/data/test_overlap.py   (or python3 training/data/test_overlap.py)
"""

import contextlib
import gzip
import io
import json
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import overlap  # noqa: E402

WORDS = ("river stone lantern harbour copper meadow signal archive winter falcon orchard engine "
         "valley thunder marble compass velvet canyon ember glacier parish beacon quarry saddle "
         "timber anchor violet furnace meridian pilgrim cobalt ledger tundra").split()
HANZI = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处理府研质"


def sentences(seed, n_words):
    rnd = random.Random(seed)
    out = []
    while sum(len(s.split()) for s in out) < n_words:
        k = rnd.randint(8, 16)
        s = " ".join(rnd.choice(WORDS) for _ in range(k))
        out.append(s[0].upper() + s[1:] + ".")
    return " ".join(out)


def hanzi(seed, n):
    rnd = random.Random(seed)
    return "".join(rnd.choice(HANZI) for _ in range(n)) + "。"


SHARED_PARA = sentences(1, 130)          # ~900 characters
SHARED_ZH = hanzi(2, 400)
BOILERPLATE = "[Transcriber's Note: This etext was produced from Planet Stories."  # 66 chars
SHARED_Q = "Which material was the old lantern in the harbour made of?"
SHARED_A = "copper and marble"


def write_jsonl(path, rows, gz=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


class OverlapTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        self.shared = os.path.join(d, "shared")
        self.train = os.path.join(d, "train")
        self.fp = os.path.join(d, "fp.bin")
        shared_doc = {"id": "s1", "title": "A shared story", "questions": [
            {"id": "s1-q1", "question": SHARED_Q, "answers": [SHARED_A], "kind": "free-form", "evidence": []}],
            "text": "\n\n".join([BOILERPLATE, sentences(3, 400), SHARED_PARA, sentences(4, 400)])}
        zh_doc = {"id": "z1", "title": "节选", "questions": [],
                  "text": hanzi(5, 3000) + "\n" + SHARED_ZH + "\n" + hanzi(6, 3000)}
        write_jsonl(os.path.join(self.shared, "qa", "fake_dev.jsonl"), [shared_doc, zh_doc])
        write_jsonl(os.path.join(self.shared, "retrieval", "fake", "corpus.jsonl"),
                    [{"id": f"c{i}", "title": f"Paper {i}", "text": sentences(100 + i, 150)} for i in range(5)])
        write_jsonl(os.path.join(self.shared, "retrieval", "fake", "queries.jsonl"),
                    [{"id": "q1", "text": "Copper lanterns are common in harbours."}])

    def tearDown(self):
        self.tmp.cleanup()

    def run_cmd(self, *argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = overlap.main(list(argv))
        return rc, out.getvalue()

    def check_with_training(self, docs):
        write_jsonl(os.path.join(self.train, "fake_train.jsonl.gz"), docs, gz=True)
        rc, _ = self.run_cmd("fingerprint", "--normalised", self.train, "--out", self.fp)
        self.assertEqual(rc, 0)
        return self.run_cmd("check", "--fingerprints", self.fp, "--shared", self.shared)

    def base_docs(self):
        # unrelated training documents; one carries the short boilerplate line and a generic question
        return [
            {"id": "t1", "title": "Training story", "text": BOILERPLATE + "\n\n" + sentences(10, 600),
             "questions": [{"id": "t1-q1", "question": "What is the plot of the story?",
                            "answers": ["Something else entirely."], "kind": "free-form", "evidence": []}]},
            {"id": "t2", "title": "训练文档", "text": hanzi(11, 2000), "questions": []},
        ]

    def test_passes_without_planted_text(self):
        rc, out = self.check_with_training(self.base_docs())
        self.assertEqual(rc, 0, out)
        self.assertIn("PASS", out)

    def test_fails_on_planted_paragraph(self):
        docs = self.base_docs()
        docs[0]["text"] = sentences(12, 300) + "\n\n" + SHARED_PARA + "\n\n" + sentences(13, 300)
        rc, out = self.check_with_training(docs)
        self.assertEqual(rc, 1, out)
        self.assertIn("LEAK qa/fake_dev.jsonl s1", out)

    def test_fails_on_planted_chinese_paragraph(self):
        docs = self.base_docs()
        docs[1]["text"] = hanzi(14, 500) + SHARED_ZH + hanzi(15, 500)
        rc, out = self.check_with_training(docs)
        self.assertEqual(rc, 1, out)
        self.assertIn("LEAK qa/fake_dev.jsonl z1", out)

    def test_fails_on_planted_retrieval_passage(self):
        docs = self.base_docs()
        docs.append({"id": "t3", "title": "x", "text": sentences(102, 150), "questions": []})
        rc, out = self.check_with_training(docs)
        self.assertEqual(rc, 1, out)
        self.assertIn("LEAK retrieval/fake/corpus.jsonl c2", out)

    def test_fails_on_planted_question_answer(self):
        docs = self.base_docs()
        docs[0]["questions"].append({"id": "t1-q2", "question": SHARED_Q.upper(), "answers": [SHARED_A],
                                     "kind": "free-form", "evidence": []})
        rc, out = self.check_with_training(docs)
        self.assertEqual(rc, 1, out)
        self.assertIn("R5", out)

    def test_same_question_other_answer_passes(self):
        docs = self.base_docs()
        docs[0]["questions"].append({"id": "t1-q2", "question": SHARED_Q, "answers": ["glass"],
                                     "kind": "free-form", "evidence": []})
        rc, out = self.check_with_training(docs)
        self.assertEqual(rc, 0, out)

    def test_filter_lists_the_planted_document(self):
        docs = self.base_docs()
        docs[0]["text"] = sentences(12, 300) + "\n\n" + SHARED_PARA
        write_jsonl(os.path.join(self.train, "fake_train.jsonl.gz"), docs, gz=True)
        out_path = os.path.join(self.tmp.name, "excluded.json")
        rc, _ = self.run_cmd("filter", "--normalised", self.train, "--shared", self.shared, "--out", out_path)
        self.assertEqual(rc, 0)
        with open(out_path, encoding="utf-8") as f:
            self.assertEqual(json.load(f)["fake_train"], ["t1"])

    def test_sampling_is_content_defined(self):
        t = overlap.norm(SHARED_PARA)
        a = {h for _, h in overlap.sampled(t)}
        b = {h for _, h in overlap.sampled(overlap.norm("prefix words " + SHARED_PARA + " suffix"))}
        self.assertTrue(a)
        self.assertTrue(a <= b)
        self.assertTrue(all(h % overlap.MOD == 0 for h in a))


if __name__ == "__main__":
    unittest.main()
