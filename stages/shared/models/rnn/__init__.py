"""The attention RNN of Bahdanau et al. (2015) and Luong et al. (2015): a bidirectional
encoder, an attentional decoder with input feeding (``model.py``), its presets
(``config.py``) and its counted FLOPs (``flops.py``) and parameters (``parameters.py``). CTranslate2 has no converter for it."""

from __future__ import annotations

from stages.shared.models.family import ModelFamily
from stages.shared.models.rnn import flops, parameters
from stages.shared.models.rnn.config import PRESETS, RnnConfig


def build(config: RnnConfig, src_vocab: int, tgt_vocab: int, language_tag_ids: tuple[int, int], pad_id: int):
    from stages.shared.models.rnn.model import RnnTranslator

    return RnnTranslator(config, src_vocab, tgt_vocab, pad_id)


def attention_modules(model) -> list:
    """Its one attention, over the source at every target step."""
    return [("attention", 0, model.attention)]


FAMILY = ModelFamily(
    name="rnn", config=RnnConfig, presets=PRESETS, build=build, parameter_layout=parameters.parameter_layout,
    forward_flops=flops.forward_flops,
    plot_marker="s", attention_modules=attention_modules,
    compile_refused="torch.compile does not trace nn.GRU, nn.LSTM or pack_padded_sequence: it would train "
                    "eagerly between graph breaks",
)
