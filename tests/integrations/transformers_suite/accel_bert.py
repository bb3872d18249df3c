"""A tiny BERT for transformers' own ``ModelTesterMixin`` and ``MemoryCleanupMixin``.

Copied by tests/integrations/test_transformers_suite.py into transformers' test tree (from
its sdist) as ``tests/models/bert/test_accel_bert.py``; the relative imports are that
tree's. Written for accel's tests after the shape of transformers' model testers: the
tests that run are transformers', this file only supplies the model and its inputs.
"""

import unittest

from transformers import BertConfig, is_torch_available
from transformers.testing_utils import require_torch, torch_device

from ...test_memory_cleanup_mixin import MemoryCleanupMixin
from ...test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask

if is_torch_available():
    from transformers import BertForMaskedLM, BertForSequenceClassification, BertModel


class BertModelTester:
    def __init__(self, parent, batch_size=13, seq_length=7, vocab_size=99):
        self.parent = parent
        self.batch_size, self.seq_length, self.vocab_size = batch_size, seq_length, vocab_size
        self.hidden_size, self.num_hidden_layers, self.num_attention_heads = 32, 2, 4
        self.is_training = True

    def get_config(self):
        return BertConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=37,
            max_position_embeddings=512,
            type_vocab_size=16,
            is_decoder=False,
            initializer_range=0.02,
        )

    def prepare_config_and_inputs_for_common(self):
        inputs = {
            "input_ids": ids_tensor([self.batch_size, self.seq_length], self.vocab_size),
            "token_type_ids": ids_tensor([self.batch_size, self.seq_length], 16),
            "attention_mask": random_attention_mask([self.batch_size, self.seq_length]),
        }
        return self.get_config(), inputs


@require_torch
class BertModelTest(MemoryCleanupMixin, ModelTesterMixin, unittest.TestCase):
    all_model_classes = (
        (BertModel, BertForMaskedLM, BertForSequenceClassification) if is_torch_available() else ()
    )
    run_under_no_grad = False  # some of ModelTesterMixin's tests train

    def setUp(self):
        super().setUp()
        self.model_tester = BertModelTester(self)

    def test_model_runs_on_torch_device(self):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = BertModel(config).to(torch_device).eval()
        out = model(**{k: v.to(torch_device) for k, v in inputs.items()})
        assert out.last_hidden_state.device.type == torch_device.split(":")[0]
