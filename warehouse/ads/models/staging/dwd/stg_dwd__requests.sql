with

source as (

    select * from {{ lake_source('dwd', 'request') }}

),

renamed as (

    select

        ----------  ids
        request_id,
        retry_of as retry_of_request_id,
        trace_id,
        span_id,
        parent_span_id,
        tenant_id,
        user_pseudonym,
        api_key_id,

        ----------  strings
        operation,
        model,
        coalesce(model_version, '(none)') as model_version,
        provider,
        server,
        server_instance,
        prompt_template_version,
        pipeline_version,
        error_type,
        finish_reason,
        feedback_kind,
        feedback_value,

        ----------  numerics
        attempt,
        status_code,
        duration_ms,
        ttft_ms,
        queue_ms,
        preprocess_ms,
        inference_ms,
        postprocess_ms,
        input_tokens,
        output_tokens,
        cached_input_tokens,
        -- Money is exact from here on: each request's cost rounded to the nano-dollar.
        cast(cost_usd as decimal(18, 9)) as cost_usd,

        ----------  booleans
        is_error,
        is_retry,
        cache_hit as is_cache_hit,
        (feedback_kind = 'thumb' and feedback_value = 'up')
            or (feedback_kind = 'review' and feedback_value = 'ok') as is_positive_feedback,

        ----------  timestamps
        ts as requested_at,
        feedback_ts as feedback_at,
        event_date

    from source

)

select * from renamed
