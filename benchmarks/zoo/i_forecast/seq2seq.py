import torch
from torch import nn


class Seq2SeqForecaster(nn.Module):
    """GRU encoder over the context window, autoregressive GRU decoder over the horizon."""

    def __init__(self, num_sensors, num_calendar, hidden_size, horizon):
        super().__init__()
        self.horizon = horizon
        self.input_proj = nn.Linear(num_sensors + num_calendar, hidden_size)
        self.encoder = nn.GRUCell(hidden_size, hidden_size)
        self.decoder = nn.GRUCell(num_sensors + num_calendar, hidden_size)
        self.norm = nn.LayerNorm(hidden_size)
        self.readout = nn.Linear(hidden_size, num_sensors)

    def forward(self, past, future_cal):
        batch, steps, _ = past.shape
        x = torch.relu(self.input_proj(past))
        h = past.new_zeros(batch, self.encoder.hidden_size)
        for t in range(steps):
            h = self.encoder(x[:, t], h)
        last_obs = past[:, -1, : self.readout.out_features]
        preds = []
        for t in range(self.horizon):
            h = self.decoder(torch.cat([last_obs, future_cal[:, t]], dim=-1), h)
            last_obs = last_obs + self.readout(self.norm(h))
            preds.append(last_obs)
        return torch.stack(preds, dim=1)
