#!/usr/bin/env python3
"""Self-test of normalise.py on tiny synthetic inputs in each source's layout (standard library only).

Run: python3 -m unittest training/data/test_normalise.py
"""

import csv
import gzip
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import normalise  # noqa: E402


def read_out(folder, name):
    with gzip.open(os.path.join(folder, name + ".jsonl.gz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class NormaliseTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.out = os.path.join(self.d, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def test_squad_style(self):
        p1, p2 = "Alpha is a town in Beta. It was founded in 1900.", "Gamma flows through Alpha."
        data = {"version": "v2.0", "data": [{"title": "Alpha_town", "paragraphs": [
            {"context": p1, "qas": [
                {"id": "a1", "question": "Where is Alpha?", "is_impossible": False,
                 "answers": [{"text": "Beta", "answer_start": 20}, {"text": "Beta", "answer_start": 20},
                             {"text": "in Beta", "answer_start": 17}]},
                {"id": "a2", "question": "Who founded Alpha?", "is_impossible": True, "answers": [],
                 "plausible_answers": [{"text": "1900", "answer_start": 43}]}]},
            {"context": p2, "qas": [
                {"id": "a3", "question": "What flows through Alpha?", "is_impossible": False,
                 "answers": [{"text": "Gamma", "answer_start": 0}]}]}]}]}
        path = os.path.join(self.d, "train-v2.0.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
        normalise.main(["--out", self.out, "--squad", path])
        (doc,) = read_out(self.out, "squad2_train")
        self.assertEqual(doc["text"], p1 + "\n\n" + p2)
        self.assertEqual(doc["title"], "Alpha town")
        q = {x["id"]: x for x in doc["questions"]}
        self.assertEqual(q["a1"]["answers"], ["Beta", "in Beta"])
        self.assertEqual(q["a1"]["kind"], "extractive")
        self.assertEqual(q["a1"]["evidence"], [p1])
        self.assertEqual(q["a2"]["kind"], "unanswerable")
        self.assertEqual(q["a2"]["answers"], [])
        self.assertEqual(q["a2"]["evidence"], [p1])   # the paragraph it was written against
        self.assertEqual(q["a3"]["evidence"], [p2])
        with open(os.path.join(self.out, "SOURCES.json"), encoding="utf-8") as f:
            src = json.load(f)
        self.assertEqual(src["squad2_train"]["questions"], {"extractive": 2, "unanswerable": 1})

    def test_fairytaleqa_and_exclude(self):
        root = os.path.join(self.d, "ftqa", "data-by-train-split")
        for split, name in (("train", "fox"), ("val", "owl"), ("test", "bear")):
            os.makedirs(os.path.join(root, "section-stories", split))
            os.makedirs(os.path.join(root, "questions", split))
            with open(os.path.join(root, "section-stories", split, name + "-story.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["section", "text"])
                w.writerow(["1", f"The {name} lived in a wood.\nIt was old."])
                w.writerow(["2", f"One day the {name} left."])
            with open(os.path.join(root, "questions", split, name + "-questions.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["question_id", "local-or-sum", "cor_section", "attribute1", "attribute2", "question",
                            "ex-or-im1", "answer1", "answer2", "answer3", "ex-or-im2", "answer4", "answer5",
                            "answer6"])
                w.writerow(["1", "summary", "1,2", "action", "", f"What did the {name} do?", "explicit",
                            "left", "went away", "", "", "it left", "", ""])
        excl = os.path.join(self.d, "excluded.json")
        with open(excl, "w") as f:
            json.dump({"fairytaleqa_trainval": ["fairytaleqa-val-owl"]}, f)
        normalise.main(["--out", self.out, "--fairytaleqa", os.path.join(self.d, "ftqa"), "--exclude", excl])
        docs = read_out(self.out, "fairytaleqa_trainval")
        self.assertEqual([d["id"] for d in docs], ["fairytaleqa-train-fox"])   # test split never read
        (q,) = docs[0]["questions"]
        self.assertEqual(q["answers"], ["left", "it left", "went away"])
        self.assertEqual(len(q["evidence"]), 2)
        self.assertEqual(docs[0]["text"], "The fox lived in a wood.\nIt was old.\n\nOne day the fox left.")

    def test_qmsum(self):
        root = os.path.join(self.d, "qmsum", "data", "ALL", "train")
        os.makedirs(root)
        m = {"meeting_transcripts": [{"speaker": "A", "content": "Hello ."}, {"speaker": "B", "content": "Hi ."},
                                     {"speaker": "A", "content": "Bye ."}],
             "general_query_list": [{"query": "Summarize the whole meeting.", "answer": "Greetings."}],
             "specific_query_list": [{"query": "What did B say?", "answer": "Hi.",
                                      "relevant_text_span": [["1", "2"]]}]}
        with open(os.path.join(root, "X001.json"), "w") as f:
            json.dump(m, f)
        normalise.main(["--out", self.out, "--qmsum", os.path.join(self.d, "qmsum")])
        (doc,) = read_out(self.out, "qmsum_train")
        self.assertEqual(doc["text"], "A: Hello .\nB: Hi .\nA: Bye .")
        self.assertEqual(doc["questions"][1]["evidence"], ["B: Hi .\nA: Bye ."])
        self.assertEqual(doc["questions"][0]["id"], "qmsum-train-X001-g0")

    def test_subjqa(self):
        base = os.path.join(self.d, "SubjQA", "SubjQA", "grocery", "splits")
        os.makedirs(base)
        r1 = "The pre-popped kernels are large and fluffy. I liked it's taste. ANSWERNOTFOUND"
        r2 = "Shipping was slow. ANSWERNOTFOUND"
        cols = ["domain", "question", "review", "human_ans_spans", "human_ans_indices", "item_id", "review_id",
                "q_review_id"]
        rows = [
            # tokenised span, recovered from the indices
            ["grocery", "What is the size of the kernel?", r1, "The pre - popped kernels are large and fluffy",
             "(0, 43)", "I1", "R1", "Q1"],
            ["grocery", "What is the size of the kernel?", r1, "ANSWERNOTFOUND", "(66, 80)", "I1", "R1", "Q1"],
            ["grocery", "How is the taste?", r1, "I liked it 's taste", "(45, 63)", "I1", "R1", "Q2"],
            ["grocery", "Is the packaging good?", r2, "ANSWERNOTFOUND", "(19, 33)", "I2", "R2", "Q3"],
            ["grocery", "Is the packaging good?", r2, "ANSWERNOTFOUND", "(19, 33)", "I2", "R2", "Q3"],
        ]
        with open(os.path.join(base, "train.csv"), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(cols)
            w.writerows(rows)
        normalise.main(["--out", self.out, "--subjqa", os.path.join(self.d, "SubjQA"), "--subjqa-domains",
                        "grocery,books"])
        docs = {d["id"]: d for d in read_out(self.out, "subjqa_train")}
        d1, d2 = docs["subjqa-train-grocery-R1"], docs["subjqa-train-grocery-R2"]
        self.assertEqual(d1["text"], r1[: -len(" ANSWERNOTFOUND")])
        q = {x["id"]: x for x in d1["questions"]}
        self.assertEqual(q["subjqa-train-grocery-Q1"]["kind"], "extractive")   # any span -> answerable
        self.assertEqual(q["subjqa-train-grocery-Q1"]["answers"], ["The pre-popped kernels are large and fluffy"])
        self.assertEqual(q["subjqa-train-grocery-Q2"]["answers"], ["I liked it's taste"])
        self.assertEqual(q["subjqa-train-grocery-Q1"]["evidence"], [d1["text"]])
        (q3,) = d2["questions"]
        self.assertEqual((q3["kind"], q3["answers"], q3["evidence"]), ("unanswerable", [], ["Shipping was slow."]))

    def test_c3(self):
        os.makedirs(os.path.join(self.d, "c3", "data"))
        d_items = [[["男：明天我们去看电影吧?", "女：好啊，看喜剧片。"],
                    [{"question": "女的想看什么?", "choice": ["喜剧片", "爱情片"], "answer": "喜剧片"},
                     {"question": "他们是什么关系?", "choice": ["朋友", "同事"], "answer": "朋友"}], "1-1"],
                   [["男：你好。"], [{"question": "男的说什么?", "choice": ["再见", "谢谢"], "answer": "谢谢"}], "1-2"]]
        m_items = [[["乌鸦口渴了，在瓶子里发现了水。"],
                    [{"question": "乌鸦在哪里发现了水?", "choice": ["河里", "瓶子里"], "answer": "瓶子里"}], "m1-1"]]
        for part, items in (("d", d_items), ("m", m_items)):
            with open(os.path.join(self.d, "c3", "data", f"c3-{part}-train.json"), "w", encoding="utf-8") as f:
                json.dump(items, f, ensure_ascii=False)
            with open(os.path.join(self.d, "c3", "data", f"c3-{part}-dev.json"), "w", encoding="utf-8") as f:
                json.dump([[["不应读到。"], [{"question": "?", "choice": ["不应"], "answer": "不应"}], "x"]], f)
        normalise.main(["--out", self.out, "--c3", os.path.join(self.d, "c3")])
        docs = read_out(self.out, "c3_train")
        self.assertEqual([d["id"] for d in docs], ["c3-train-d-1-1", "c3-train-m-m1-1"])   # 1-2: no verbatim answer
        self.assertEqual(docs[0]["text"], "男：明天我们去看电影吧?\n女：好啊，看喜剧片。")
        self.assertEqual(docs[0]["language"], "zh")
        (q,) = docs[0]["questions"]                      # "朋友" is not in the text
        self.assertEqual((q["kind"], q["answers"], q["evidence"]), ("extractive", ["喜剧片"], ["女：好啊，看喜剧片。"]))

    def test_tweetqa(self):
        t1 = "Our prayers are with Independence High School. Doug Ducey (@dougducey) February 12, 2016"
        data = [{"Question": "which school?", "Answer": ["independence high school"], "Tweet": t1, "qid": "a"},
                {"Question": "who tweeted?", "Answer": ["doug ducey"], "Tweet": t1, "qid": "b"},
                {"Question": "what is in the picture?", "Answer": ["a dog"], "Tweet": t1, "qid": "c"},
                {"Question": "what?", "Answer": ["tweet is not visible"], "Tweet": "Hello there", "qid": "d"}]
        path = os.path.join(self.d, "train.json")
        with open(path, "w") as f:
            json.dump(data, f)
        normalise.main(["--out", self.out, "--tweetqa", path])
        (doc,) = read_out(self.out, "tweetqa_train")
        self.assertEqual(doc["text"], t1)
        self.assertEqual([(q["id"], q["answers"]) for q in doc["questions"]],
                         [("tweetqa-train-a", ["Independence High School"]), ("tweetqa-train-b", ["Doug Ducey"])])
        self.assertTrue(all(q["kind"] == "extractive" and q["evidence"] == [t1] for q in doc["questions"]))


if __name__ == "__main__":
    unittest.main()
